package file

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Filesystem magic numbers (statfs f_type) whose locks do not exclude
// processes of other hosts, or are not kept by the kernel of this one.
var unsafeMagic = map[int64]string{
	0x6969:     "nfs",
	0x517b:     "smb",
	0xff534d42: "cifs",
	0xfe534d42: "smb2",
	0x5346414f: "afs",
	0x00c36400: "ceph",
	0x0bd00bd0: "lustre",
	0x01161970: "gfs2",
	0x7461636f: "ocfs2",
	0x01021997: "9p",
	0x47504653: "gpfs",
}

// unsafeFuse are FUSE filesystems (fstype fuse.<name> in mountinfo) that
// reach another host.
var unsafeFuse = map[string]bool{"sshfs": true, "glusterfs": true, "s3fs": true, "rclone": true, "gcsfuse": true, "ceph-fuse": true, "davfs": true, "juicefs": true, "seaweedfs": true}

const fuseMagic = 0x65735546

// checkFS refuses a directory on a filesystem that statfs identifies as a
// network one.
func checkFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil // the writability check reports what is wrong
	}
	magic := int64(st.Type) & 0xffffffff
	if name, bad := unsafeMagic[magic]; bad {
		return &UnsafeFSError{Dir: dir, FS: name}
	}
	if magic == fuseMagic {
		if sub := fuseType(dir); unsafeFuse[sub] {
			return &UnsafeFSError{Dir: dir, FS: "fuse." + sub}
		}
	}
	return nil
}

// fuseType returns the FUSE subtype of the mount holding dir ("sshfs"),
// read from /proc/self/mountinfo; "" if unknown.
func fuseType(dir string) string {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	best, typ := -1, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		mp := unescapeMount(fields[4])
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
			best, typ = len(mp), fields[sep+1]
		}
	}
	if sub, ok := strings.CutPrefix(typ, "fuse."); ok {
		return sub
	}
	return ""
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
