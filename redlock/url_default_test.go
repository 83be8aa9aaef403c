package redlock

import (
	"net/url"
	"testing"
	"time"
)

// TestURLDefaultNodeTimeout: a URL without node_timeout gets
// DefaultURLNodeTimeout (the 50 ms DefaultNodeTimeout failed the
// mutual-exclusion check on a loaded 2-core machine every time); an
// explicit node_timeout still wins.
func TestURLDefaultNodeTimeout(t *testing.T) {
	for raw, want := range map[string]time.Duration{
		"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3":                   DefaultURLNodeTimeout,
		"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?node_timeout=75ms": 75 * time.Millisecond,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
		_, c, err := parseURL(u)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if c.nodeTimeout != want {
			t.Errorf("%s: node timeout %v, want %v", raw, c.nodeTimeout, want)
		}
	}
	if DefaultURLNodeTimeout < 500*time.Millisecond {
		t.Errorf("DefaultURLNodeTimeout %v", DefaultURLNodeTimeout)
	}
}
