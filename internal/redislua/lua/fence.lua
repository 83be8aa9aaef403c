-- fence.lua: the fencing counter, shared by every script that creates a
-- lock (acquire, fair acquire and fair handover).

-- next_token returns the next fencing token of the lock: the INCR of its
-- slot's counter fence, raised above the lock's own counter legacy (the
-- per-key layout before per-slot counters) when that still exists, which
-- is then deleted: tokens stay strictly increasing per lock across the
-- change of layout.
local function next_token(fence, legacy)
	local t = redis.call('INCR', fence)
	if legacy then
		local l = tonumber(redis.call('GET', legacy))
		if l then
			if l >= t then
				t = l + 1
				redis.call('SET', fence, t)
			end
			redis.call('DEL', legacy)
		end
	end
	return t
end
