package redislua

import (
	"crypto/sha1"
	"encoding/hex"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestComposition (no server): every script is its fragments followed by
// its own file, and the owner check is written once, in hold.lua, for the
// plain release, the fair release and the refresh.
func TestComposition(t *testing.T) {
	for name, parts := range map[string][]string{
		"release": releaseParts, "refresh": refreshParts, "fair release": fairReleaseParts, "release after": releaseAfterParts,
	} {
		assert.True(t, slices.Contains(parts, "hold.lua"), "%s does not include hold.lua", name)
	}
	for name, parts := range map[string][]string{
		"acquire": acquireParts, "fair acquire": fairAcquireParts, "fair release": fairReleaseParts, "force release": forceReleaseParts,
	} {
		assert.True(t, slices.Contains(parts, "fence.lua"), "%s does not include fence.lua", name)
	}
	check := "redis.call('HMGET', KEYS[1], 'o', 't', ARGV[3]"
	files, err := fs.Glob(luaFiles, "lua/*.lua")
	if err != nil || len(files) != 11+7 { // + the semaphore scripts (sem_*.lua), acquire_all.lua, release_after.lua and watch.lua
		t.Fatalf("embedded %v, %v; want 18 files", files, err)
	}
	for _, f := range files {
		b, _ := luaFiles.ReadFile(f)
		if n := strings.Count(string(b), check); (f == "lua/hold.lua") != (n == 1) || n > 1 {
			t.Errorf("%s has the owner check %d times (want it once, in hold.lua only)", f, n)
		}
	}
	for _, s := range []struct {
		hash  string
		parts []string
	}{{acquireScript.Hash(), acquireParts}, {releaseScript.Hash(), releaseParts}, {refreshScript.Hash(), refreshParts},
		{fairAcquireScript.Hash(), fairAcquireParts}, {fairReleaseScript.Hash(), fairReleaseParts},
		{inspectScript.Hash(), inspectParts}, {forceReleaseScript.Hash(), forceReleaseParts},
		{releaseAfterScript.Hash(), releaseAfterParts}} {
		var want strings.Builder
		for _, p := range s.parts {
			b, _ := luaFiles.ReadFile("lua/" + p)
			want.Write(b)
		}
		sum := sha1.Sum([]byte(want.String()))
		if got := hex.EncodeToString(sum[:]); got != s.hash {
			t.Errorf("%v: script hash %s, want the SHA-1 of the concatenated files %s", s.parts, s.hash, got)
		}
	}
}

// TestComposedScripts: the composed scripts are what the server runs. After
// SCRIPT FLUSH each operation falls back to EVAL with the composed text,
// which the server then knows under the hash EVALSHA sends, and it behaves
// as the owner check says.
func TestComposedScripts(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	require.NoError(t, c.ScriptFlush(ctx).Err())
	holds := NewHoldSource()
	k := KeysFor("t:", "composed")
	h := holds.Next()
	if r, err := Acquire(ctx, c, k, "A", h, "", time.Minute); err != nil || r.Outcome != Acquired {
		t.Fatalf("acquire = %+v, %v", r, err)
	}
	if held, err := Refresh(ctx, c, k, "A", 1, h, time.Minute); err != nil || !held {
		t.Fatalf("refresh = %v, %v", held, err)
	}
	if held, err := Refresh(ctx, c, k, "B", 1, h, time.Minute); err != nil || held {
		t.Fatalf("refresh by another owner = %v, %v", held, err)
	}
	if r, err := Release(ctx, c, k, "A", 1, h); err != nil || r != Freed {
		t.Fatalf("release = %v, %v", r, err)
	}
	fk := KeysFor("t:", "composed-fair").Fair()
	fh := holds.Next()
	if r, err := FairAcquire(ctx, c, fk, "A", time.Minute, FairAttempt{Hold: fh, N: 1}); err != nil || r.Outcome != Acquired {
		t.Fatalf("fair acquire = %+v, %v", r, err)
	}
	if r, err := Release(ctx, c, fk, "B", 0, fh); err != nil || r != NotHeld {
		t.Fatalf("fair release by another owner = %v, %v", r, err)
	}
	if r, err := Release(ctx, c, fk, "A", 0, fh); err != nil || r != Freed {
		t.Fatalf("fair release = %v, %v", r, err)
	}
	hashes := []string{acquireScript.Hash(), releaseScript.Hash(), refreshScript.Hash(), fairAcquireScript.Hash(), fairReleaseScript.Hash()}
	exists, err := c.ScriptExists(ctx, hashes...).Result()
	require.NoError(t, err)
	for i, ok := range exists {
		assert.True(t, ok, "script %s: the server does not know the composed script's hash after running it", hashes[i])
	}
}
