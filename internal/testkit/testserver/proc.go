package testserver

import (
	"os"
	"strconv"
)

// procsWhere returns the pids of the processes whose /proc/<pid>/<file>
// satisfies match (processes that end meanwhile are skipped).
func procsWhere(file string, match func(content []byte) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/" + file)
		if err == nil && match(b) {
			out = append(out, pid)
		}
	}
	return out
}
