package testserver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// TemplateEnv, set to "off", makes every server initialise its data
// directory itself (initdb, mariadb-install-db) instead of copying a cached
// one.
const TemplateEnv = "DISTLOCK_TESTSERVER_TEMPLATE"

// templateVersion changes when what a template holds changes in a way its
// fingerprint does not show.
const templateVersion = "1"

// initFromTemplate fills dataDir, which does not exist yet, with a freshly
// initialised data directory: a copy of the cached template for the
// fingerprint when there is one, else by running initialise, whose result
// (not yet touched by a server) then becomes the template. Initialising a
// PostgreSQL or MariaDB data directory costs seconds of CPU per server; a
// copy costs a fraction of that. The templates live in the user's cache
// directory (distlock-testserver/<kind>-<hash>), keyed by the binary that
// made them (path, size, modification time) and the parts of the
// initialisation that matter (fingerprint); they are published by rename,
// so concurrent test processes see a whole template or none. Copies belong
// to cred's user when cred is set.
func initFromTemplate(kind, dataDir string, cred *syscall.Credential, fingerprint []string, initialise func() error) error {
	tmpl := templatePath(kind, fingerprint)
	if tmpl != "" {
		if err := copyTree(tmpl, dataDir, cred); err == nil {
			return nil
		}
		_ = os.RemoveAll(dataDir) // a partial copy, or none
	}
	if err := initialise(); err != nil {
		return err
	}
	if tmpl != "" {
		publishTemplate(dataDir, tmpl)
	}
	return nil
}

// templatePath is where the template for fingerprint lives ("" when there
// is no cache directory, or templates are off).
func templatePath(kind string, fingerprint []string) string {
	if os.Getenv(TemplateEnv) == "off" {
		return ""
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	h := sha256.New()
	fmt.Fprintln(h, templateVersion)
	for _, f := range fingerprint {
		fmt.Fprintln(h, f)
	}
	return filepath.Join(cache, "distlock-testserver", kind+"-"+hex.EncodeToString(h.Sum(nil))[:16])
}

// binaryStamp identifies an installed binary: its path, size and
// modification time (an upgrade changes them).
func binaryStamp(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return path
	}
	return fmt.Sprintf("%s %d %d", path, st.Size(), st.ModTime().UnixNano())
}

// publishTemplate copies dataDir to tmpl, unless a template is there
// already; best effort.
func publishTemplate(dataDir, tmpl string) {
	if _, err := os.Stat(tmpl); err == nil {
		return
	}
	if err := os.MkdirAll(filepath.Dir(tmpl), 0o755); err != nil {
		return
	}
	tmp, err := os.MkdirTemp(filepath.Dir(tmpl), filepath.Base(tmpl)+".tmp-")
	if err != nil {
		return
	}
	defer os.RemoveAll(tmp) // left over only if the rename failed
	if copyTree(dataDir, filepath.Join(tmp, "data"), nil) != nil {
		return
	}
	_ = os.Rename(filepath.Join(tmp, "data"), tmpl)
}

// copyTree copies the directory src to dst (which must not exist) with the
// same modes, owned by cred's user when cred is set. It copies directories
// and regular files only, and fails on anything else.
func copyTree(src, dst string, cred *syscall.Credential) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if strings.HasPrefix(rel, "..") {
			return fmt.Errorf("testserver: copy %s: %s is outside it", src, path)
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if rel == "." {
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					return err
				}
			}
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if err := copyFile(path, target, info.Mode().Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("testserver: copy %s: %s is neither a file nor a directory", src, path)
		}
		// Mkdir and OpenFile apply the umask: set the mode exactly.
		if err := os.Chmod(target, info.Mode().Perm()); err != nil {
			return err
		}
		if cred != nil {
			return os.Lchown(target, int(cred.Uid), int(cred.Gid))
		}
		return nil
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
