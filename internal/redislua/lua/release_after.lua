-- release_after.lua (after hold.lua): KEYS[1] lock; ARGV[1] owner, ARGV[2]
-- token ("0": not checked), ARGV[3] hold id, ARGV[4] ms, ARGV[5] channel
-- ("" or absent: no publication). Releases the hold
-- but keeps the lock taken by its owner until ARGV[4] ms from now (a
-- minimum hold, distlock.WithMinHold): the end is kept in the field lg
-- (the later of the old and new ends), which release_hold honours. With no
-- other hold left the lock expires exactly then, sooner than its TTL if
-- need be; with others it is never shortened. The lock is not free, but
-- when its life was cut short the wake-up is published (wake: if marked)
-- so that its waiters, asleep until the old expiry, attempt again and
-- learn the new one. The owner may nest into the lingering lock; another
-- owner finds it busy until it expires.
-- Returns 0 not held (nothing changed), 1 lingering with no hold, 2 other
-- holds remain.
local f, n, ok = lock_fields()
if not ok then
	return 0
end
redis.replicate_commands() -- TIME before writes, as release_hold reads it
local tm = redis.call('TIME')
local now = tm[1] * 1000 + math.floor(tm[2] / 1000)
local lg = math.max(tonumber(f.lg or '0'), now + tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'lg', lg)
redis.call('HDEL', KEYS[1], ARGV[3])
if n > 1 then
	if redis.call('PTTL', KEYS[1]) < lg - now then
		redis.call('PEXPIRE', KEYS[1], lg - now)
	end
	return 2
end
-- The lock expires when the minimum hold ends; its waiters are woken when
-- that cut its life short, as release_hold does.
local cut = redis.call('PTTL', KEYS[1]) > lg - now
redis.call('PEXPIRE', KEYS[1], lg - now)
if cut then
	wake(ARGV[5], f)
end
return 1
