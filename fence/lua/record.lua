-- The end of every guarded Redis write: the write ran without error, so
-- record its token if it is newer (an equal token is the same lease writing
-- again: nothing to record) and answer {1, token seen before, result}.
if not fence_seen or fence_less(fence_seen, ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return {1, fence_seen or '0', fence_result}
