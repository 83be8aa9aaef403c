-- sem_release.lua (after sem_lib.lua): KEYS[1..3] as in sem_lib.lua;
-- ARGV[1] permit id, ARGV[2] channel ("": no publication), ARGV[3] "1" to
-- give back an expired permit too (the undo of a lost acquire reply).
-- Gives the permit back and publishes on the channel.
-- Returns 1 given back, 0 not held (nothing changed).
redis.replicate_commands()
local now = sem_now()
if not (sem_held(ARGV[1], now) or (ARGV[3] == '1' and redis.call('ZSCORE', KEYS[1], ARGV[1]))) then
	return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
sem_expire(now)
if ARGV[2] ~= '' then
	redis.call('PUBLISH', ARGV[2], '1')
end
return 1
