-- force_release.lua (after fence.lua, fair_lib.lua, state.lua): KEYS as
-- state.lua; ARGV[1] channel ("": no publication), ARGV[2] the lock's name.
-- Deletes the lock whatever its owner and holds, and hands it on as a
-- release that frees it does: to the first live waiter of a fair lock, or
-- else with the plain wake-up carrying the evicted token. A free lock is
-- left as it is. Returns state() as it was before.
local s, t = state()
if not t then
	return s
end
redis.call('DEL', KEYS[1])
if not (KEYS[3] and serve(ARGV[1], ARGV[2])) and ARGV[1] ~= '' then
	redis.call('PUBLISH', ARGV[1], t)
end
return s
