-- Guarded SET. KEYS[2]: the key; ARGV[2]: the value; ARGV[3]: expiry in
-- milliseconds, '0' for none.
if ARGV[3] ~= '0' then
  fence_result = redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
else
  fence_result = redis.call('SET', KEYS[2], ARGV[2])
end
