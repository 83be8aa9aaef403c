-- acquire_all.lua (after fence.lua): takes several free locks at once, all
-- or nothing. KEYS in triplets, one per lock: the lock, its slot's fencing
-- counter, its legacy counter. ARGV[1] ttl ms, then per lock i owner, hold
-- id, the lock's name and metadata ("" for none) at ARGV[4i-2 .. 4i+1].
-- Returns {1, token...} all taken, in order; {0, i, pttl} lock i is held
-- (by anyone: a nested hold is not taken here), nothing changed but the
-- mark w on lock i, as a busy acquire.lua sets it.
redis.replicate_commands() -- TIME before writes, as acquire.lua
local tm = redis.call('TIME')
local ms = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local n = #KEYS / 3
for i = 1, n do
	if redis.call('EXISTS', KEYS[3 * i - 2]) == 1 then
		redis.call('HSET', KEYS[3 * i - 2], 'w', 1)
		return {0, i, redis.call('PTTL', KEYS[3 * i - 2])}
	end
end
local out = {1}
for i = 1, n do
	local lk = KEYS[3 * i - 2]
	local t = next_token(KEYS[3 * i - 1], KEYS[3 * i])
	local a = 4 * i - 2
	if ARGV[a + 3] ~= '' then
		redis.call('HSET', lk, 'o', ARGV[a], 't', t, ARGV[a + 1], ms, 'name', ARGV[a + 2], 'meta', ARGV[a + 3])
	else
		redis.call('HSET', lk, 'o', ARGV[a], 't', t, ARGV[a + 1], ms, 'name', ARGV[a + 2])
	end
	redis.call('PEXPIRE', lk, ARGV[1])
	out[#out + 1] = t
end
return out
