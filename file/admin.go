//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package file

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/distlock/distlock/backend"
)

// Operator calls (backend.Inspector, backend.ForceReleaser). The kernel
// says whether a lock file is held; its record says by whom. Both are read
// under the key's fence lock, shared for Inspect, so a record is never
// read half-written; a lock whose holder has its kernel lock but has not
// written its record yet, or whose record is unreadable, shows Held with
// no owner.

// Inspect implements backend.Inspector: SessionBound, TTL 0, Waiters -1
// (waiters are not counted). It creates and changes nothing.
func (d *driver) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	hi, err := d.holder(ctx, key)
	return hi.LockInfo, err
}

func (d *driver) holder(ctx context.Context, key string) (HolderInfo, error) {
	if err := d.live(); err != nil {
		return HolderInfo{}, err
	}
	stem := baseName("k", key)
	var hi HolderInfo
	err := d.underFence(ctx, stem, false, func(*os.File) error {
		var err error
		hi, err = d.readHolder(key, stem)
		return err
	})
	return hi, err
}

// readHolder probes the lock file of stem and reads its record.
func (d *driver) readHolder(key, stem string) (HolderInfo, error) {
	hi := HolderInfo{LockInfo: backend.LockInfo{Key: key, Waiters: -1}}
	f, err := os.Open(filepath.Join(d.dir, stem+".lock"))
	if errors.Is(err, fs.ErrNotExist) {
		return hi, nil
	}
	if err != nil {
		return hi, err
	}
	defer f.Close()
	held, err := probe(f)
	if err != nil || !held {
		return hi, err
	}
	b, err := readAll(f)
	if err != nil {
		return hi, err
	}
	// A record that does not decode (edited by hand) hides the holder,
	// not the lock: it shows Held with no owner, and can be forced.
	rec, _ := decodeRecord(b)
	hi.Held, hi.SessionBound = true, true
	if rec.Held {
		hi.Owner, hi.Metadata, hi.Token, hi.Holds = rec.Owner, rec.Metadata, rec.Token, rec.Holds
		hi.PID, hi.Host, hi.Since = rec.PID, rec.Host, rec.Since
	}
	return hi, nil
}

// ForceRelease implements backend.ForceReleaser. A kernel lock cannot be
// taken from the process that holds it, so the lock file is replaced: a
// fresh file, free, is renamed over it under the fence lock. The evicted
// holder keeps a lock on a file that no longer has the name: its Refresh,
// Release and nested acquisitions find that out (ErrNotHeld), and its
// watcher ends its lease at once (ErrLockLost). Waiters and new
// acquisitions take the new file; the fence file is untouched, so the next
// token is higher.
func (d *driver) ForceRelease(ctx context.Context, key string, want backend.Holder) (backend.LockInfo, error) {
	if err := d.live(); err != nil {
		return backend.LockInfo{}, err
	}
	stem := baseName("k", key)
	var out backend.LockInfo
	err := d.underFence(ctx, stem, true, func(*os.File) error {
		hi, err := d.readHolder(key, stem)
		if err != nil {
			return err
		}
		if !want.Matches(hi.LockInfo) {
			return want.Refusal()
		}
		if !hi.Held {
			out = hi.LockInfo
			return nil
		}
		if err := d.replace(key, stem, hi.Token); err != nil {
			return err
		}
		out = hi.LockInfo
		return nil
	})
	d.dw.wake(stem + ".lock")
	return out, err
}

// replace renames a fresh, free lock file (with the old one's mode) over
// the lock file of stem. Callers hold the fence lock.
func (d *driver) replace(key, stem string, token uint64) error {
	path := filepath.Join(d.dir, stem+".lock")
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	tmp, err := os.CreateTemp(d.dir, stem+".lock.force-*")
	if err != nil {
		return err
	}
	err = writeRecord(tmp, record{Token: token})
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if hk := d.cfg.hooks; err == nil && hk != nil && hk.beforeSwap != nil {
		hk.beforeSwap(key)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
