-- sem_refresh.lua (after sem_lib.lua): KEYS[1..3] as in sem_lib.lua;
-- ARGV[1] permit id, ARGV[2] ttl ms. Extends an unexpired permit to at
-- least ttl from now (never shortens it).
-- Returns 1 held (extended), 0 not held (nothing changed).
redis.replicate_commands()
local now = sem_now()
if not sem_held(ARGV[1], now) then
	return 0
end
local exp = now + tonumber(ARGV[2])
if exp > tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1])) then
	redis.call('ZADD', KEYS[1], 'XX', exp, ARGV[1])
end
sem_expire(now)
return 1
