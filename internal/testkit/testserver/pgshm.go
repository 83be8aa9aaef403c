package testserver

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pgSegment is the System V shared memory segment a PostgreSQL server
// records in its data directory's postmaster.pid (line 7: "key id"). A new
// postmaster refuses to start while any process is still attached to the
// segment of the one before it: that is PostgreSQL's interlock against two
// servers on one data directory.
type pgSegment struct{ key, id int }

// pgSegmentOf reads the segment recorded in dataDir/postmaster.pid; false
// if there is none (no file, or a server that never got that far).
func pgSegmentOf(dataDir string) (pgSegment, bool) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return pgSegment{}, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 7 {
		return pgSegment{}, false
	}
	f := strings.Fields(lines[6])
	if len(f) != 2 {
		return pgSegment{}, false
	}
	// PostgreSQL writes the key as an unsigned long of a signed 32-bit
	// key_t: a negative key (a data directory's inode above 2^31) is
	// written as a 20-digit number. /proc/sysvipc/shm prints it signed.
	key, err1 := strconv.ParseUint(f[0], 10, 64)
	id, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || id < 0 {
		return pgSegment{}, false
	}
	return pgSegment{key: int(int32(uint32(key))), id: id}, true
}

// attached reports how many processes are attached to the segment; -1 if
// it is gone.
func (g pgSegment) attached() int {
	f, err := os.Open("/proc/sysvipc/shm")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// key shmid perms size cpid lpid nattch ...
		fs := strings.Fields(sc.Text())
		if len(fs) < 7 {
			continue
		}
		if key, err := strconv.Atoi(fs[0]); err != nil || key != g.key || fs[1] != strconv.Itoa(g.id) {
			continue
		}
		n, _ := strconv.Atoi(fs[6])
		return n
	}
	return -1
}

// attachers lists the processes that map the segment, found by its
// "/SYSV<key>" mapping in /proc/<pid>/maps.
func (g pgSegment) attachers() []int {
	name := []byte(fmt.Sprintf("/SYSV%08x", uint32(int32(g.key))))
	return procsWhere("maps", func(b []byte) bool { return bytes.Contains(b, name) })
}

// pgReleaseSegment runs before a PostgreSQL server starts on dataDir: if
// the server before it left processes attached to its segment (a backend
// forked while the postmaster was being killed, or one that outlived a
// postmaster killed on its own), it kills them and waits until the
// segment is free, so the new postmaster does not refuse to start with
// "pre-existing shared memory block is still in use". Bounded by 10 s.
func pgReleaseSegment(dataDir string) error {
	g, ok := pgSegmentOf(dataDir)
	if !ok {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	var nextKill time.Time
	for g.attached() > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres: %d processes still attached to the old server's shared memory (key %d, id %d) after 10s", g.attached(), g.key, g.id)
		}
		// A killed process stays attached until it has exited: scan and
		// kill again only after it had time to.
		if time.Now().After(nextKill) {
			for _, pid := range g.attachers() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			nextKill = time.Now().Add(time.Second)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// pgRemoveSegment removes the segment of the last server on dataDir, once
// its processes are gone: a killed server leaves it behind (a restart
// would remove it; the end of a test does not), and the system's segments
// are limited (kernel.shmmni, 4096 by default).
func pgRemoveSegment(dataDir string) {
	g, ok := pgSegmentOf(dataDir)
	if !ok {
		return
	}
	if g.attached() < 0 {
		return // gone, or its id now names another segment
	}
	for _, pid := range g.attachers() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_, _ = unix.SysvShmCtl(g.id, unix.IPC_RMID, nil)
}
