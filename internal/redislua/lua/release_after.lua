-- release_after.lua (after hold.lua): KEYS[1] lock; ARGV[1] owner, ARGV[2]
-- token ("0": not checked), ARGV[3] hold id, ARGV[4] ms. Releases the hold
-- but keeps the lock taken by its owner until ARGV[4] ms from now (a
-- minimum hold, distlock.WithMinHold): the end is kept in the field lg
-- (the later of the old and new ends), which release_hold honours. With no
-- other hold left the lock expires exactly then, sooner than its TTL if
-- need be; with others it is never shortened. Nothing is published: the
-- lock is not free. The owner may nest into the lingering lock; another
-- owner finds it busy until it expires.
-- Returns 0 not held (nothing changed), 1 lingering with no hold, 2 other
-- holds remain.
local f, n, ok = lock_fields()
if not ok then
	return 0
end
local now = now_ms()
local lg = math.max(tonumber(f.lg or '0'), now + tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'lg', lg)
redis.call('HDEL', KEYS[1], ARGV[3])
if n > 1 then
	if redis.call('PTTL', KEYS[1]) < lg - now then
		redis.call('PEXPIRE', KEYS[1], lg - now)
	end
	return 2
end
redis.call('PEXPIRE', KEYS[1], lg - now)
return 1
