-- fair_lib.lua (after fence.lua): the functions the fair scripts share (see
-- "Fair queue" in the package documentation). KEYS[1] lock, KEYS[2] fence,
-- KEYS[3] queue, KEYS[4] waiter entries, KEYS[5] legacy fence counter.
redis.replicate_commands() -- TIME before writes: a no-op from Redis 5 on, needed on 3.2 and 4
local clock
local function now_us()
	if not clock then
		local t = redis.call('TIME')
		clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
	end
	return clock
end
-- entry returns waiter h's entry: "deadline seen attempt px len owner
-- metadata", len the owner's length in bytes.
local function entry(h)
	local e = redis.call('HGET', KEYS[4], h)
	if not e then return nil end
	local dl, seen, att, px, n, rest = string.match(e, '^(%d+) (%d+) (%d+) (%d+) (%d+) (.*)$')
	n = tonumber(n)
	if not n then return {} end -- unreadable: dropped at the head
	return {dl = tonumber(dl), seen = tonumber(seen), att = att, px = px,
		owner = string.sub(rest, 1, n), meta = string.sub(rest, n + 1)}
end
-- new_entry is the entry of a waiter of owner with metadata meta.
local function new_entry(dl, seen, att, px, owner, meta)
	return string.format('%d %d %s %s %d ', dl, seen, att, px, #owner) .. owner .. meta
end
-- grant writes the free lock for owner with token t, first hold h, name
-- and metadata meta ('' for none), and expiry px.
local function grant(owner, t, h, hv, name, meta, px)
	if meta ~= '' then
		redis.call('HSET', KEYS[1], 'o', owner, 't', t, h, hv, 'name', name, 'meta', meta)
	else
		redis.call('HSET', KEYS[1], 'o', owner, 't', t, h, hv, 'name', name)
	end
	redis.call('PEXPIRE', KEYS[1], px)
end
-- drop takes h out of the queue, with its entry and its owner's count.
local function drop(h)
	if redis.call('ZREM', KEYS[3], h) == 1 then
		local e = entry(h)
		redis.call('HDEL', KEYS[4], h)
		if e and e.owner then
			local c = 'c' .. e.owner
			if redis.call('HINCRBY', KEYS[4], c, -1) <= 0 then
				redis.call('HDEL', KEYS[4], c)
			end
		end
	end
end
-- head returns the first waiter whose entry is alive and that entry,
-- dropping dead ones on the way.
local function head()
	while true do
		local h = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
		if not h then return nil end
		local e = entry(h)
		if e and e.dl and e.dl >= now_us() then return h, e end
		drop(h)
	end
end
-- announce publishes on ch that waiter h (entry e) holds the lock with
-- token t.
local function announce(ch, h, e, t)
	if ch ~= '' then
		redis.call('PUBLISH', ch, 'g' .. h .. ' ' .. string.format('%d %s %d', tonumber(t), e.att, now_us() - e.seen))
	end
end
-- nest gives every live queued waiter of owner — who now holds the lock
-- with token t — a hold of its own, as a reentrant acquire would, and
-- announces each on ch; dead ones are dropped.
local function nest(owner, t, ch)
	local n = tonumber(redis.call('HGET', KEYS[4], 'c' .. owner) or '0')
	if n <= 0 then return end
	for _, h in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
		local e = entry(h)
		if e and e.owner == owner then
			drop(h)
			if e.dl and e.dl >= now_us() then
				redis.call('HSET', KEYS[1], h, 1)
				if redis.call('PTTL', KEYS[1]) < tonumber(e.px) then
					redis.call('PEXPIRE', KEYS[1], e.px)
				end
				announce(ch, h, e, t)
			end
			n = n - 1
			if n <= 0 then return end
		end
	end
end
-- serve grants the free lock (named name) to the first live waiter, and
-- nests that waiter's owner's other waiters, announcing each grant on ch.
-- Returns the owner, or nil if no one waits.
local function serve(ch, name)
	local h, e = head()
	if not h then return nil end
	drop(h)
	local t = next_token(KEYS[2], KEYS[5])
	grant(e.owner, t, h, 1, name, e.meta, e.px)
	announce(ch, h, e, t)
	nest(e.owner, t, ch)
	return e.owner
end
