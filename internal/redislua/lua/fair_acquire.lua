-- fair_acquire.lua (after fence.lua, fair_lib.lua): KEYS as fair_lib.lua;
-- ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] hold id, ARGV[4] "1" to enqueue
-- when busy, ARGV[5] attempt number, ARGV[6] queue TTL ms, ARGV[7] channel,
-- ARGV[8] the lock's name, ARGV[9] metadata ("" for none).
-- Returns {1, token} new lock, {2, token} reentrant hold, {3, token, pttl}
-- granted to this hold while it waited, {0, pttl, holder} busy.
local o = redis.call('HGET', KEYS[1], 'o')
if not o then
	local h = head()
	if not h or h == ARGV[3] then
		local t = next_token(KEYS[2], KEYS[5])
		grant(ARGV[1], t, ARGV[3], 1, ARGV[8], ARGV[9], ARGV[2])
		if h then
			drop(h)
			nest(ARGV[1], t, ARGV[7])
		end
		return {1, t}
	end
	o = serve(ARGV[7], ARGV[8]) -- the head's turn; it may be this owner's other hold
end
if o == ARGV[1] then
	local v = redis.call('HMGET', KEYS[1], 't', ARGV[3])
	if v[2] then
		return {3, v[1], redis.call('PTTL', KEYS[1])}
	end
	redis.call('HSET', KEYS[1], ARGV[3], 1)
	if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
		redis.call('PEXPIRE', KEYS[1], ARGV[2])
	end
	drop(ARGV[3])
	return {2, v[1]}
end
if ARGV[4] == '1' then
	if not redis.call('ZSCORE', KEYS[3], ARGV[3]) then
		redis.call('ZADD', KEYS[3], redis.call('HINCRBY', KEYS[4], '#', 1), ARGV[3])
		redis.call('HINCRBY', KEYS[4], 'c' .. ARGV[1], 1)
	end
	local qttl = tonumber(ARGV[6])
	local now = now_us()
	redis.call('HSET', KEYS[4], ARGV[3], new_entry(now + qttl * 1000, now, ARGV[5], ARGV[2], ARGV[1], ARGV[9]))
	redis.call('PEXPIRE', KEYS[3], 2 * qttl)
	redis.call('PEXPIRE', KEYS[4], 2 * qttl)
end
return {0, redis.call('PTTL', KEYS[1]), o}
