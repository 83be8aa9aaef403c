-- refresh.lua (after hold.lua): KEYS[1] lock; ARGV[1] owner, ARGV[2] token
-- ("0": not checked), ARGV[3] hold id, ARGV[4] ttl ms.
-- Returns 0 not held (nothing changed), else the remaining ms after the
-- refresh, which never shortens the expiry: max(pttl, ttl).
-- The usual refresh, which extends, is one PEXPIRE GT (Redis 7 and later:
-- set only if later than the current expiry); otherwise, or where GT is
-- unknown (an error, caught), PTTL decides as before.
if not held() then
	return 0
end
local ttl = tonumber(ARGV[4])
local r = redis.pcall('PEXPIRE', KEYS[1], ARGV[4], 'GT')
if r == 1 then
	return ttl
end
local p = redis.call('PTTL', KEYS[1])
if p < ttl then -- before Redis 7 (r an error), or a lock without expiry (-1), which GT leaves so
	redis.call('PEXPIRE', KEYS[1], ARGV[4])
	return ttl
end
return p
