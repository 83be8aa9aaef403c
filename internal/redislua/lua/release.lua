-- release.lua (after hold.lua): KEYS[1] lock; ARGV[1] owner, ARGV[2] token
-- ("0": not checked), ARGV[3] hold id, ARGV[4] channel ("": no
-- publication). A freed lock publishes its token on the channel when it
-- is marked w (someone waits or watches: see acquire.lua and inspect.lua),
-- and only then; so does a release that leaves the lock to expire sooner
-- than its TTL at the end of a minimum hold (release_hold's cut): its
-- waiters, asleep until the old expiry, attempt again and learn the new.
-- Returns 0 not held (nothing changed), 1 freed, 2 hold released and others
-- of the same owner remain.
local r, f = release_hold()
if r == 1 or f.cut then
	wake(ARGV[4], f)
end
return r
