-- release.lua (after hold.lua): KEYS[1] lock; ARGV[1] owner, ARGV[2] token
-- ("0": not checked), ARGV[3] hold id, ARGV[4] channel ("": no
-- publication). A freed lock publishes its token on the channel when it
-- is marked w (someone waits or watches: see acquire.lua and inspect.lua),
-- and only then.
-- Returns 0 not held (nothing changed), 1 freed, 2 hold released and others
-- of the same owner remain.
local r, f = release_hold()
if r == 1 and f.w and ARGV[4] ~= '' then
	redis.call('PUBLISH', ARGV[4], f.t)
end
return r
