package fence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Names of the Dir guard's own files in the protected directory.
const (
	dirTokenFile = ".distlock-fence"      // the highest token, decimal
	dirLockFile  = ".distlock-fence.lock" // flock'd around check and rename; never replaced
	dirTempGlob  = ".distlock-fence-tmp-*"
)

// Dir is a fencing guard for files in one local directory: a file is
// installed (renamed into place) only if its token is not below the highest
// token recorded for the directory, and the token is recorded, atomically
// with respect to every other guarded write to the directory.
//
// How: the new content is written to a temporary file in the directory and
// synced first. Then, under an exclusive flock(2) on the directory's lock
// file, the guard reads the recorded token (the file .distlock-fence), refuses
// a lower one, records a higher one (temporary file, fsync, rename, fsync of
// the directory), and only then renames the content into place and syncs
// the directory. Recording before renaming means a crash in between leaves
// the token ahead of the content, never a stale write able to overwrite
// newer content; the same lease retrying (an equal token) is allowed.
//
// Guarantees, for writers that all go through Dir on one host: once a file
// was installed with token T, no install with a lower token succeeds in the
// directory (a *StaleError, errors.Is ErrStale; the stale content is
// deleted, nothing in place changes). Readers see whole files, old or new,
// never a partial one (rename is atomic).
//
// Not guaranteed: writes that bypass Dir; reads; anything outside the
// directory. flock is local to one kernel: the directory must be on a local
// file system, shared by processes of one host (not NFS, SMB or a FUSE
// mount of object storage, whose locks and renames do not give this). For
// storage shared between hosts the check must run where the data lives; see
// docs/FENCING.md for what S3 conditional writes would need.
type Dir struct {
	path string
}

// OpenDir returns the guard for the existing directory path.
func OpenDir(path string) (*Dir, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("fence: %s is not a directory", path)
	}
	return &Dir{path: path}, nil
}

// Path is the protected directory.
func (d *Dir) Path() string { return d.path }

// checkName accepts a plain file name in the directory, not one of the
// guard's own.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`+"\x00") || strings.HasPrefix(name, dirTokenFile) {
		return fmt.Errorf("%w: file name %q (want a plain name in the directory, not %s*)", ErrInvalidResource, name, dirTokenFile)
	}
	return nil
}

// WriteFile installs data as the file name in the directory (mode perm) if
// token is not below the directory's highest recorded token, and records
// token. See Dir for the guarantee. A refused write returns a *StaleError and
// leaves the directory as it was; token 0 returns ErrZeroToken. ctx bounds
// the wait for another writer's flock.
func (d *Dir) WriteFile(ctx context.Context, name string, token uint64, data []byte, perm os.FileMode) error {
	if err := checkWrite(d.path, token); err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return err
	}
	src, err := d.temp(data, perm)
	if err != nil {
		return err
	}
	return d.Install(ctx, token, src, name)
}

// Install renames the finished file src (on the same file system, best in
// the directory itself, and already synced) to name in the directory if
// token is not below the directory's highest recorded token, and records
// token. A refused or failed install removes src (a refusal returns a
// *StaleError); bad arguments leave it alone. It is
// WriteFile for content made elsewhere (a tool's output file).
func (d *Dir) Install(ctx context.Context, token uint64, src, name string) (err error) {
	if err := checkWrite(d.path, token); err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(src)
		}
	}()
	return d.fenced(ctx, name, token, func() (string, error) { return src, nil })
}

// Update replaces the file name in the directory with what update makes of
// its current content (nil when the file does not exist), if token is not
// below the directory's highest recorded token, and records token. The read,
// update and install happen under the guard's lock, so no other guarded
// write to the directory comes in between: a read-modify-write (a counter,
// an append) loses no update. An error from update is returned as is and
// changes nothing. The file gets mode perm.
func (d *Dir) Update(ctx context.Context, name string, token uint64, perm os.FileMode, update func(old []byte) ([]byte, error)) error {
	return d.fenced(ctx, name, token, func() (string, error) {
		old, err := os.ReadFile(filepath.Join(d.path, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("fence: %w", err)
		}
		data, err := update(old)
		if err != nil {
			return "", err
		}
		return d.temp(data, perm)
	})
}

// fenced is the Dir guard's one mechanism: under the directory's flock,
// refuse a token below the recorded one, record a higher one, then rename
// the file content() returns to name.
func (d *Dir) fenced(ctx context.Context, name string, token uint64, content func() (string, error)) error {
	if err := checkWrite(d.path, token); err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return err
	}
	lf, err := os.OpenFile(filepath.Join(d.path, dirLockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	defer lf.Close()
	if err := lockFile(ctx, lf); err != nil {
		return fmt.Errorf("fence: lock %s: %w", lf.Name(), err)
	}
	defer func() { _ = unlockFile(lf) }()

	highest, err := d.Highest()
	if err != nil {
		return err
	}
	if token < highest {
		return &StaleError{Resource: d.path, Token: token, Highest: highest}
	}
	src, err := content()
	if err != nil {
		return err
	}
	if token > highest {
		if err := d.record(token); err != nil {
			_ = os.Remove(src)
			return err
		}
	}
	if err := os.Rename(src, filepath.Join(d.path, name)); err != nil {
		_ = os.Remove(src)
		return fmt.Errorf("fence: %w", err)
	}
	return syncDir(d.path)
}

// temp writes data to a synced temporary file in the directory.
func (d *Dir) temp(data []byte, perm os.FileMode) (string, error) {
	tmp, err := os.CreateTemp(d.path, dirTempGlob)
	if err != nil {
		return "", fmt.Errorf("fence: %w", err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return "", fmt.Errorf("fence: %w", err)
	}
	return tmp.Name(), nil
}

// Highest returns the directory's highest recorded token (0 when none).
func (d *Dir) Highest() (uint64, error) {
	b, err := os.ReadFile(filepath.Join(d.path, dirTokenFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fence: %w", err)
	}
	t, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("fence: corrupt token file %s: %w", filepath.Join(d.path, dirTokenFile), err)
	}
	return t, nil
}

// record durably replaces the token file with token (caller holds the flock).
func (d *Dir) record(token uint64) error {
	tmp, err := d.temp([]byte(strconv.FormatUint(token, 10)+"\n"), 0o644)
	if err == nil {
		if err = os.Rename(tmp, filepath.Join(d.path, dirTokenFile)); err != nil {
			_ = os.Remove(tmp)
		}
	}
	if err != nil {
		return fmt.Errorf("fence: record token: %w", err)
	}
	return syncDir(d.path)
}

// syncDir makes renames in dir durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("fence: sync %s: %w", dir, err)
	}
	return nil
}
