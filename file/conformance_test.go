package file

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/stretchr/testify/require"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	admin := newT(t, dir)
	h := conformance.Harness{
		Name: "file",
		NewLocker: func(ctx context.Context) (*distlock.Locker, error) {
			return New(dir)
		},
		// The kernel frees a dead process's locks when it closes its
		// descriptors: at once.
		SessionTimeout: time.Second,
		URL:            "file://" + dir,
		UnreachableURL: "file://" + filepath.Join(dir, "no", "such", "dir"),
		BadURLs: []string{
			"file://host" + dir,
			"file://localhost" + dir,
			"file://user@" + dir,
			"file://" + dir + "?mkdir=maybe",
			"file://" + dir + "?ttl=1s",
			"file://" + dir + "#frag",
			"file:",
			"file://",
			"file://" + filepath.Join(dir, "a-file"),
		},
		Faults: conformance.Faults{
			// A crash as the kernel sees it: every descriptor of the
			// Locker closed, nothing rewritten.
			KillClient: func(l *distlock.Locker) error {
				var d *driver
				if !l.As(&d) {
					return errors.New("not a file Locker")
				}
				d.shutdown(true)
				return nil
			},
			// Replace the lock file, as ForceRelease does.
			Expire: func(ctx context.Context, key string) error {
				_, err := driverOf(admin).ForceRelease(ctx, key, zeroHolder)
				return err
			},
			Held: func(ctx context.Context) ([]string, error) { return heldFiles(dir) },
		},
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a-file"), nil, 0o644))
	conformance.Run(t, h)
}

// heldFiles lists the lock files of dir whose kernel lock is held.
func heldFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var held []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		h, err := probe(f)
		f.Close()
		if err != nil {
			return nil, err
		}
		if h {
			held = append(held, e.Name())
		}
	}
	return held, nil
}
