-- hold.lua: the owner check, shared by every script that acts on a held
-- lock (release, fair release, refresh). KEYS[1] lock; ARGV[1] owner,
-- ARGV[2] token ("0": not checked), ARGV[3] hold id.

-- held reports whether ARGV[1] holds KEYS[1] with token ARGV[2] and hold
-- ARGV[3], and returns the lock's owner, token, that hold's field, name and
-- metadata.
local function held()
	local v = redis.call('HMGET', KEYS[1], 'o', 't', ARGV[3], 'name', 'meta')
	return v[1] == ARGV[1] and v[3] ~= false and (ARGV[2] == '0' or v[2] == ARGV[2]), v
end

-- release_hold removes hold ARGV[3] if held() and deletes the lock with the
-- last hold. Returns 0 not held (nothing changed), 1 freed, 2 hold released
-- and others of the same owner remain; and held()'s fields.
local function release_hold()
	local ok, v = held()
	if not ok then
		return 0, v
	end
	-- The fields that are not holds: o, t, and name and meta where present
	-- (a lock written before they existed has neither).
	local fixed = 2
	if v[4] then fixed = fixed + 1 end
	if v[5] then fixed = fixed + 1 end
	if redis.call('HLEN', KEYS[1]) > fixed + 1 then
		redis.call('HDEL', KEYS[1], ARGV[3])
		return 2, v
	end
	redis.call('DEL', KEYS[1])
	return 1, v
end
