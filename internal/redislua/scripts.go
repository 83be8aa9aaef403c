package redislua

import (
	"embed"

	goredis "github.com/redis/go-redis/v9"
)

// The scripts live in lua/, one file per script plus fragments that Lua
// has no way to include: fence.lua (the next fencing token), hold.lua (the
// owner check, and the removal of one hold, that release, fair release and
// refresh share), fair_lib.lua (the fair queue's functions) and state.lua
// (a lock's state as inspect and force release report it). Compose
// prepends the fragments at init, so each check is written once and the
// server runs the composed text. Redis runs a script atomically; PTTL and
// PEXPIRE inside it see one frozen clock.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// Compose returns the text of the embedded files names, in order, as one
// script: the fragments first, then the script's own file.
func Compose(names ...string) string {
	var src []byte
	for _, n := range names {
		b, err := luaFiles.ReadFile("lua/" + n)
		if err != nil {
			panic("redislua: missing embedded script " + n) // a build defect, caught by every test
		}
		src = append(src, b...)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			src = append(src, '\n')
		}
	}
	return string(src)
}

// The composition of every script: its fragments, then its own file.
var (
	acquireParts      = []string{"fence.lua", "acquire.lua"}
	releaseParts      = []string{"hold.lua", "release.lua"}
	refreshParts      = []string{"hold.lua", "refresh.lua"}
	fairAcquireParts  = []string{"fence.lua", "fair_lib.lua", "fair_acquire.lua"}
	fairReleaseParts  = []string{"fence.lua", "fair_lib.lua", "hold.lua", "fair_release.lua"}
	inspectParts      = []string{"fence.lua", "fair_lib.lua", "state.lua", "inspect.lua"}
	forceReleaseParts = []string{"fence.lua", "fair_lib.lua", "state.lua", "force_release.lua"}
	releaseAfterParts = []string{"hold.lua", "release_after.lua"}
)

var (
	acquireScript      = goredis.NewScript(Compose(acquireParts...))
	releaseScript      = goredis.NewScript(Compose(releaseParts...))
	refreshScript      = goredis.NewScript(Compose(refreshParts...))
	fairAcquireScript  = goredis.NewScript(Compose(fairAcquireParts...))
	fairReleaseScript  = goredis.NewScript(Compose(fairReleaseParts...))
	inspectScript      = goredis.NewScript(Compose(inspectParts...))
	forceReleaseScript = goredis.NewScript(Compose(forceReleaseParts...))
	releaseAfterScript = goredis.NewScript(Compose(releaseAfterParts...))
)

// ScriptHashes returns the SHA-1 digests of the acquire, release and refresh
// scripts, as EVALSHA sends them (for tests and diagnostics).
func ScriptHashes() (acquire, release, refresh string) {
	return acquireScript.Hash(), releaseScript.Hash(), refreshScript.Hash()
}
