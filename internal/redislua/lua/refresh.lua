-- refresh.lua (after hold.lua): KEYS[1] lock; ARGV[1] owner, ARGV[2] token
-- ("0": not checked), ARGV[3] hold id, ARGV[4] ttl ms.
-- Returns 0 not held (nothing changed), else the remaining ms after the
-- refresh, which never shortens the expiry: max(pttl, ttl).
if not held() then
	return 0
end
local p = redis.call('PTTL', KEYS[1])
local ttl = tonumber(ARGV[4])
if p < ttl then
	redis.call('PEXPIRE', KEYS[1], ARGV[4])
	return ttl
end
return p
