package file

import (
	"strings"

	"golang.org/x/sys/unix"
)

// unsafeFS are macOS filesystem type names whose locks do not exclude
// processes of other hosts.
var unsafeFS = map[string]bool{"nfs": true, "smbfs": true, "afpfs": true, "webdav": true, "cifs": true, "macfuse": true, "osxfuse": true, "fusefs": true}

// checkFS refuses a directory on a network filesystem.
func checkFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil // the writability check reports what is wrong
	}
	name := unix.ByteSliceToString(st.Fstypename[:])
	if unsafeFS[strings.ToLower(name)] {
		return &UnsafeFSError{Dir: dir, FS: name}
	}
	return nil
}
