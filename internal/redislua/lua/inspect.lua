-- inspect.lua (after fence.lua, fair_lib.lua, state.lua): KEYS as state.lua.
-- Returns state(). It changes nothing but the mark w on a held lock (see
-- acquire.lua): the look registers the caller for the release, as a busy
-- attempt does, so that Election.Observe, which subscribes and then looks,
-- is woken when the leader it saw releases (release.lua publishes only
-- for a marked lock).
local s, t = state()
if t then
	redis.call('HSET', KEYS[1], 'w', 1)
end
return s
