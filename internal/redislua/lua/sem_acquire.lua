-- sem_acquire.lua (after fence.lua, sem_lib.lua): KEYS[1..3] as in
-- sem_lib.lua, KEYS[4] the slot's fencing counter; ARGV[1] permit id,
-- ARGV[2] ttl ms, ARGV[3] permits. Drops expired holders, then takes a
-- permit if fewer than ARGV[3] are held. A retry of a granted id returns
-- its token again (idempotent).
-- Returns {1, token} granted, {0, ms until the first holder expires} busy,
-- {-1, count} refused: the semaphore is held with another count.
redis.replicate_commands()
local now = sem_now()
local n = tonumber(ARGV[3])
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 1, #gone do
	redis.call('ZREM', KEYS[1], gone[i])
	redis.call('HDEL', KEYS[3], gone[i])
end
local live = redis.call('ZCARD', KEYS[1])
if live > 0 then
	local have = tonumber(redis.call('GET', KEYS[2]))
	if have and have ~= n then
		return {-1, have}
	end
	local t = redis.call('HGET', KEYS[3], ARGV[1])
	if t and redis.call('ZSCORE', KEYS[1], ARGV[1]) then
		return {1, tonumber(t)}
	end
end
if live >= n then
	local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
	return {0, math.max(tonumber(first[2]) - now, 1)}
end
local t = next_token(KEYS[4], nil)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], t)
redis.call('SET', KEYS[2], n)
sem_expire(now)
return {1, t}
