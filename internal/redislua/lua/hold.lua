-- hold.lua: the owner check, shared by every script that acts on a held
-- lock (release, fair release, refresh, release after). KEYS[1] lock;
-- ARGV[1] owner, ARGV[2] token ("0": not checked), ARGV[3] hold id.

-- held reports, with one HMGET of three fields, whether ARGV[1] holds
-- KEYS[1] with token ARGV[2] and hold ARGV[3] (refresh needs no more).
local function held()
	local v = redis.call('HMGET', KEYS[1], 'o', 't', ARGV[3])
	return v[1] == ARGV[1] and v[3] ~= false and (ARGV[2] == '0' or v[2] == ARGV[2])
end

-- lock_fields reads the whole lock hash with one HGETALL (a hash of a
-- handful of fields: cheaper than an HMGET and an HLEN) and returns its
-- fields that are not holds by name (o, t, name, meta, lg, w; nil where
-- absent), the number of holds (fields beginning with 'h', see
-- HoldSource) and whether ARGV[1] holds it with token ARGV[2] and hold
-- ARGV[3].
local function lock_fields()
	local a = redis.call('HGETALL', KEYS[1])
	local f, n, mine = {}, 0, false
	for i = 1, #a, 2 do
		local k = a[i]
		if string.byte(k, 1) == 104 then -- 'h': a hold
			n = n + 1
			if k == ARGV[3] then mine = true end
		else
			f[k] = a[i + 1]
		end
	end
	return f, n, mine and f.o == ARGV[1] and (ARGV[2] == '0' or f.t == ARGV[2])
end

-- wake publishes the plain wake-up (the token f.t) on channel ch ("" or
-- nil: none) for a lock marked w (someone waits or watches: see
-- acquire.lua), and only for one so marked.
local function wake(ch, f)
	if f.w and ch and ch ~= '' then
		redis.call('PUBLISH', ch, f.t)
	end
end

-- release_hold removes hold ARGV[3] if ARGV[1] holds the lock with it and
-- deletes the lock with the last hold, unless a minimum hold (lg) still
-- runs: then the lock stays, expiring when it ends. Returns 0 not held
-- (nothing changed), 1 freed, 2 hold released and the lock still taken
-- (other holds of the same owner, or the minimum hold); and
-- lock_fields()'s fields, with cut true when the minimum hold shortened
-- the lock's life: its waiters, asleep until the old expiry, must then be
-- woken (wake) to learn the new one, since the lock expires unreleased.
-- The minimum hold's branch reads the clock itself (as release_after.lua
-- does): a function per helper would be a closure made on every call of
-- every script that includes this file, the hot release's among them.
local function release_hold()
	local f, n, ok = lock_fields()
	if not ok then
		return 0, f
	end
	if n > 1 then
		redis.call('HDEL', KEYS[1], ARGV[3])
		return 2, f
	end
	if f.lg then
		redis.replicate_commands() -- TIME before writes: a no-op from Redis 5 on, needed on 3.2 and 4
		local tm = redis.call('TIME')
		local left = tonumber(f.lg) - (tm[1] * 1000 + math.floor(tm[2] / 1000))
		if left > 0 then
			redis.call('HDEL', KEYS[1], ARGV[3])
			f.cut = redis.call('PTTL', KEYS[1]) > left
			redis.call('PEXPIRE', KEYS[1], left)
			return 2, f
		end
	end
	redis.call('DEL', KEYS[1])
	return 1, f
end
