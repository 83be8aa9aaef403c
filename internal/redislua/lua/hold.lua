-- hold.lua: the owner check, shared by every script that acts on a held
-- lock (release, fair release, refresh). KEYS[1] lock; ARGV[1] owner,
-- ARGV[2] token ("0": not checked), ARGV[3] hold id.

-- held reports whether ARGV[1] holds KEYS[1] with token ARGV[2] and hold
-- ARGV[3], and returns the lock's owner, token, that hold's field, name,
-- metadata and the end of its minimum hold (lg: server ms, set by
-- release_after.lua).
local function held()
	local v = redis.call('HMGET', KEYS[1], 'o', 't', ARGV[3], 'name', 'meta', 'lg')
	return v[1] == ARGV[1] and v[3] ~= false and (ARGV[2] == '0' or v[2] == ARGV[2]), v
end

-- fixed_fields counts the fields of held()'s v that are not holds: o, t,
-- and name, meta and lg where present (a lock written before they existed
-- has neither).
local function fixed_fields(v)
	local n = 2
	for i = 4, 6 do
		if v[i] then n = n + 1 end
	end
	return n
end

-- now_ms is the server's clock in ms. It allows writes after it (Redis 3.2
-- and 4 need the call; later versions always replicate effects).
local function now_ms()
	redis.replicate_commands()
	local tm = redis.call('TIME')
	return tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
end

-- release_hold removes hold ARGV[3] if held() and deletes the lock with the
-- last hold, unless a minimum hold (lg) still runs: then the lock stays,
-- expiring when it ends. Returns 0 not held (nothing changed), 1 freed, 2
-- hold released and the lock still taken (other holds of the same owner,
-- or the minimum hold); and held()'s fields.
local function release_hold()
	local ok, v = held()
	if not ok then
		return 0, v
	end
	if redis.call('HLEN', KEYS[1]) > fixed_fields(v) + 1 then
		redis.call('HDEL', KEYS[1], ARGV[3])
		return 2, v
	end
	if v[6] then
		local left = tonumber(v[6]) - now_ms()
		if left > 0 then
			redis.call('HDEL', KEYS[1], ARGV[3])
			redis.call('PEXPIRE', KEYS[1], left)
			return 2, v
		end
	end
	redis.call('DEL', KEYS[1])
	return 1, v
end
