-- state.lua (after fence.lua, fair_lib.lua): the lock's state as the
-- operator scripts (inspect, force release) report it. KEYS as
-- fair_lib.lua; KEYS[3] and after are absent for a lock that is not fair.

-- state returns {the lock hash's fields and values, its PTTL, the number
-- of live waiters in the fair queue (-1: not fair)} and the lock's token
-- (nil: not held).
local function state()
	local f = redis.call('HGETALL', KEYS[1])
	local t
	for i = 1, #f, 2 do
		if f[i] == 't' then t = f[i + 1] end
	end
	local w = -1
	if KEYS[3] then
		w = 0
		for _, h in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
			local e = entry(h)
			if e and e.dl and e.dl >= now_us() then w = w + 1 end
		end
	end
	return {f, redis.call('PTTL', KEYS[1]), w}, t
end
