-- The fence check every guarded Redis write starts with.
-- KEYS[1]: the resource's token record (a string key, no expiry).
-- ARGV[1]: the write's token, decimal without leading zeros (1 to 20 digits).
-- Tokens are compared as decimal strings (length, then bytes), exact for
-- every uint64: Lua numbers are doubles, exact only below 2^53.
local function fence_less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local fence_seen = redis.call('GET', KEYS[1])
if fence_seen and fence_less(ARGV[1], fence_seen) then
  return {0, fence_seen}
end
local fence_result
