package testserver

import (
	"os"
	"path/filepath"
	"testing"
)

// postmaster.pid's segment line, with a key PostgreSQL wrote from a
// negative key_t (a data directory's inode above 2^31) as a 20-digit
// unsigned long, and an ordinary one.
func TestPgSegmentOfParsesEveryKey(t *testing.T) {
	for _, c := range []struct {
		line    string
		key, id int
	}{
		{"  5432001    123456", 5432001, 123456},
		{"18446744071562067969      7", -2147483647, 7},
	} {
		dir := t.TempDir()
		pid := "4242\n" + dir + "\n1795880000\n5432\n\n127.0.0.1\n" + c.line + "\nready   \n"
		if err := os.WriteFile(filepath.Join(dir, "postmaster.pid"), []byte(pid), 0o600); err != nil {
			t.Fatal(err)
		}
		g, ok := pgSegmentOf(dir)
		if !ok || g.key != c.key || g.id != c.id {
			t.Errorf("%q: %+v %v, want key %d id %d", c.line, g, ok, c.key, c.id)
		}
	}
}
