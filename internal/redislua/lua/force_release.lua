-- force_release.lua (after fence.lua, fair_lib.lua, state.lua): KEYS as
-- state.lua; ARGV[1] channel ("": no publication), ARGV[2] the lock's name,
-- ARGV[3] the owner that must hold it ("": any), ARGV[4] the token it must
-- hold it with ("0": any).
-- Deletes the lock whatever its owner and holds, and hands it on as a
-- release that frees it does: to the first live waiter of a fair lock, or
-- else with the plain wake-up carrying the evicted token. A free lock is
-- left as it is. Returns state() as it was before.
local s, t = state()
if not t then
	return s
end
if ARGV[3] ~= '' and (redis.call('HGET', KEYS[1], 'o') ~= ARGV[3] or (ARGV[4] ~= '0' and t ~= ARGV[4])) then
	return s -- held by another holder than the one named: left as it is
end
redis.call('DEL', KEYS[1])
if not (KEYS[3] and serve(ARGV[1], ARGV[2])) and ARGV[1] ~= '' then
	redis.call('PUBLISH', ARGV[1], t)
end
return s
