-- The end of every guarded Redis write. A write that answered an error
-- reply (redis.error_reply) failed: pass the error on, record nothing.
-- Otherwise record the write's token if it is newer (an equal token is the
-- same lease writing again: nothing to record) and answer
-- {1, token seen before, result}.
if type(fence_result) == 'table' and fence_result.err then
  return fence_result
end
if not fence_seen or fence_less(fence_seen, ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return {1, fence_seen or '0', fence_result}
