-- sem_lib.lua: what the semaphore scripts share. KEYS[1] the holders'
-- sorted set (member: permit id, score: expiry in server ms), KEYS[2] the
-- permit count, KEYS[3] the holders' tokens (hash: permit id -> token).

-- sem_now returns the server time in ms.
local function sem_now()
	local tm = redis.call('TIME')
	return tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
end

-- sem_expire gives the semaphore's keys the expiry of its last holder, so
-- that a semaphore whose holders all died disappears; with no holder left
-- it deletes them.
local function sem_expire(now)
	local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
	if #last == 0 then
		redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
		return
	end
	local px = math.max(tonumber(last[2]) - now, 1)
	for i = 1, 3 do
		redis.call('PEXPIRE', KEYS[i], px)
	end
end

-- sem_held reports whether permit id is held (unexpired) at now.
local function sem_held(id, now)
	local s = redis.call('ZSCORE', KEYS[1], id)
	return s and tonumber(s) > now
end
