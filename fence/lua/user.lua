-- Guarded user script: the body below runs as a function whose KEYS and
-- ARGV are the caller's (the script's own, shifted past the token record and
-- the token), so it reads like a plain EVAL script; what it returns is the
-- write's result.
fence_result = (function(KEYS, ARGV)
--[[BODY]]
end)({unpack(KEYS, 2)}, {unpack(ARGV, 2)})
