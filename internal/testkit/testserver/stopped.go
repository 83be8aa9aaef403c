package testserver

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// waitStopped waits, up to d, until every thread of pid and of its
// children is stopped (state T in /proc/<pid>/task/<tid>/stat). SIGSTOP
// returns before the kernel has stopped a multi-threaded process — a JVM
// thread in the middle of a reply still sends it — so Pause waits for the
// stop it promises. Without /proc it returns at once.
func waitStopped(pid int, d time.Duration) {
	pids := append([]int{pid}, ChildPIDs(pid)...)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if allStopped(pids) {
			return
		}
	}
}

func allStopped(pids []int) bool {
	for _, p := range pids {
		stats, _ := filepath.Glob("/proc/" + strconv.Itoa(p) + "/task/*/stat")
		for _, f := range stats {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // the thread ended
			}
			i := bytes.LastIndexByte(b, ')')
			if i < 0 {
				continue
			}
			if st := strings.Fields(string(b[i+1:])); len(st) > 0 && st[0] != "T" && st[0] != "t" && st[0] != "Z" && st[0] != "X" {
				return false
			}
		}
	}
	return true
}
