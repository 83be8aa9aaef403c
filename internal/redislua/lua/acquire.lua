-- acquire.lua (after fence.lua): KEYS[1] lock, KEYS[2] slot fence counter
-- and KEYS[3] legacy counter (both optional: no fencing); ARGV[1] owner,
-- ARGV[2] ttl ms, ARGV[3] hold id, ARGV[4] the lock's name, ARGV[5]
-- metadata (absent or empty: none), ARGV[6] '1' when the caller's Locker
-- has other waiters of this lock (a new lock, or one the caller's owner
-- holds and the caller nests into, is then marked w at once: they wait for
-- its release without attempting against it; a lock of the same owner
-- taken by another process was not marked for them). Each hold field's value is the server time
-- (ms) at which it was added; a new lock also stores its name and metadata.
-- Returns {1, token} new lock, {2, token} reentrant hold, {0, pttl, holder,
-- age} busy, with age the ms since the holder's newest hold was added (-1:
-- unknown, such as a hold written by a fair script, whose value is 1).
-- A busy attempt marks the lock hash with the field w: the release that
-- frees it publishes the wake-up (release.lua publishes only then), which
-- this caller, subscribed before it attempted, may wait for. A waiter
-- attempts again after every wake-up (or hand-on, see redissub) and after
-- its timer, so it marks whichever holder it finds busy next.
-- A free lock (the uncontended case) is found with one EXISTS of the lock
-- and its legacy counter and taken with one INCR, HSET and PEXPIRE; a lock
-- that exists is read with one HGETALL, which has what every other outcome
-- needs (a busy attempt, a waiter's usual one, reads the hash once).
-- Numbers go to redis.call as strings made here (a Lua number costs the
-- server a floating-point formatting per argument): the hold's time ms is
-- TIME's seconds and the first three of its microseconds' six digits.
redis.replicate_commands() -- TIME before writes: a no-op from Redis 5 on, needed on 3.2 and 4
local tm = redis.call('TIME')
local ms = tm[1] .. string.sub('00000' .. tm[2], -6, -4)
local n, t -- the new lock's token, a number and its text; nil while the lock may be held
if KEYS[2] then
	if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
		n = redis.call('INCR', KEYS[2]) -- free, and no legacy counter to raise the token above
	end
elseif redis.call('EXISTS', KEYS[1]) == 0 then
	n = 0
end
if not n then
	local f = redis.call('HGETALL', KEYS[1])
	local now, o, w, age = tonumber(ms), false, false, -1
	for i = 1, #f, 2 do
		local k = f[i]
		if k == 'o' then
			o = f[i + 1]
		elseif k == 't' then
			t = f[i + 1]
		elseif k == 'w' then
			w = true
		elseif string.byte(k, 1) == 104 then -- 104: 'h', a hold
			local v = tonumber(f[i + 1])
			if v and v > 1 and (age < 0 or now - v < age) then
				age = math.max(now - v, 0)
			end
		end
	end
	if o == ARGV[1] then
		if ARGV[6] == '1' and not w then
			redis.call('HSET', KEYS[1], ARGV[3], ms, 'w', '1') -- nested, as a new lock is marked
		else
			redis.call('HSET', KEYS[1], ARGV[3], ms)
		end
		if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
			redis.call('PEXPIRE', KEYS[1], ARGV[2])
		end
		return {2, t}
	end
	if o then
		if not w then
			redis.call('HSET', KEYS[1], 'w', '1')
		end
		return {0, redis.call('PTTL', KEYS[1]), o, age}
	end
	n = 0 -- free, with a legacy counter (or a hash without an owner)
	if KEYS[2] then n = next_token(KEYS[2], KEYS[3]) end
end
-- A new lock; marked w at once when others of the caller's Locker wait.
t = string.format('%d', n)
if ARGV[5] and ARGV[5] ~= '' then
	if ARGV[6] == '1' then
		redis.call('HSET', KEYS[1], 'o', ARGV[1], 't', t, ARGV[3], ms, 'name', ARGV[4], 'meta', ARGV[5], 'w', '1')
	else
		redis.call('HSET', KEYS[1], 'o', ARGV[1], 't', t, ARGV[3], ms, 'name', ARGV[4], 'meta', ARGV[5])
	end
elseif ARGV[6] == '1' then
	redis.call('HSET', KEYS[1], 'o', ARGV[1], 't', t, ARGV[3], ms, 'name', ARGV[4], 'w', '1')
else
	redis.call('HSET', KEYS[1], 'o', ARGV[1], 't', t, ARGV[3], ms, 'name', ARGV[4])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, n}
