-- watch.lua: KEYS[1] lock. Registers a watcher (backend.Notifier.Watch,
-- after its subscription is confirmed) for the release of the lock's
-- current holder: marks a held lock with the field w, as a busy attempt
-- does (see acquire.lua), so that its freeing release publishes the
-- wake-up. A free lock is left as it is: the watcher's next attempt, or
-- Observe's next look (inspect.lua), marks its next holder. Returns 1.
if redis.call('EXISTS', KEYS[1]) == 1 then
	redis.call('HSET', KEYS[1], 'w', 1)
end
return 1
