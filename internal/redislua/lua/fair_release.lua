-- fair_release.lua (after fence.lua, fair_lib.lua and hold.lua): KEYS as
-- fair_lib.lua; ARGV[1] owner, ARGV[2] token ("0": not checked), ARGV[3]
-- hold id, ARGV[4] channel, ARGV[5] the lock's name. It first takes the
-- hold out of the queue (a waiter leaving, or the undo of an attempt),
-- then releases as release.lua does;
-- a freed lock goes to the first live waiter, and only without one is the
-- plain wake-up published. A lock found free (expired) is served too.
-- Returns 0 not held, 1 freed, 2 hold released and others remain.
drop(ARGV[3])
local r, f = release_hold()
if r == 0 and not f.o then
	serve(ARGV[4], ARGV[5])
end
if r == 1 and not serve(ARGV[4], ARGV[5]) and ARGV[4] ~= '' then
	redis.call('PUBLISH', ARGV[4], f.t)
end
return r
