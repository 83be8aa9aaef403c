package openfuzz

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// urlInText matches the backend URLs written in the README, the docs and
// the tests: every scheme distlock registers, up to a quote, a space or a
// closing bracket.
var urlInText = regexp.MustCompile(`\b(?:rediss?|redlock|zookeeper|zk|memcached|mysql|postgres(?:ql)?|mem)://[^\s"'` + "`" + `<>)\]]*`)

// seedURLs collects every URL form in the module's README, docs and test
// files, so the fuzzer starts from what users and tests actually write.
func seedURLs(t testing.TB) []string {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	set := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bench") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") && !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range urlInText.FindAllString(string(b), -1) {
			set[m] = true
		}
		return nil
	})
	require.NoError(t, err)
	for _, u := range MalformedURLs {
		set[u] = true
	}
	for _, s := range backend.Schemes() {
		set[s+"://"] = true
		set[s+"://127.0.0.1:1/x?prefix=p"] = true
	}
	out := make([]string, 0, len(set))
	for u := range set {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

func TestSeedsCoverEverySchemeAndTheReadme(t *testing.T) {
	seeds := seedURLs(t)
	for _, want := range []string{"redis://127.0.0.1:6379/0", "mem://"} {
		assert.True(t, contains(seeds, want), "seeds lack %q", want)
	}
	for _, s := range backend.Schemes() {
		n := 0
		for _, u := range seeds {
			if strings.HasPrefix(u, s+"://") {
				n++
			}
		}
		if n < 2 {
			t.Errorf("scheme %s: %d seeds", s, n)
		}
	}
	t.Logf("%d seed URLs", len(seeds))
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// FuzzOpen: Open never panics, never hangs past its context, and its
// errors are one line, wrap a sentinel, and never show the URL's password.
// Every call is bounded by a short context; URLs that open are closed.
func FuzzOpen(f *testing.F) {
	for _, u := range seedURLs(f) {
		f.Add(u)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if namesRemoteAddress(raw) {
			t.Skip("names a non-loopback address: tests reach loopback only")
		}
		checkOpen(t, raw)
	})
}

// The fuzzed URLs must not reach beyond this machine: names resolve only
// through /etc/hosts (the resolver refuses to dial a DNS server), and
// URLs that contain a non-loopback IP literal are skipped.
func init() {
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS in the fuzz test")
	}}
}

// namesRemoteAddress reports whether raw contains an IP literal outside
// loopback and the unspecified address.
func namesRemoteAddress(raw string) bool {
	for _, tok := range strings.FieldsFunc(raw, func(r rune) bool {
		return !strings.ContainsRune("0123456789abcdefABCDEF:.%", r)
	}) {
		tok = strings.Trim(tok, ":.")
		for _, cand := range []string{tok, strings.SplitN(tok, "%", 2)[0]} {
			if a, err := netip.ParseAddr(cand); err == nil && !a.IsLoopback() && !a.IsUnspecified() {
				return true
			}
			if ap, err := netip.ParseAddrPort(cand); err == nil && !ap.Addr().IsLoopback() && !ap.Addr().IsUnspecified() {
				return true
			}
		}
	}
	return false
}

// checkOpen opens raw within 300ms and checks the outcome.
func checkOpen(t *testing.T, raw string) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	l, err := distlock.Open(ctx, raw)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Open(%q) took %v with a 300ms context", raw, took)
	}
	if err == nil {
		if cerr := l.Close(); cerr != nil && !errors.Is(cerr, distlock.ErrUnavailable) {
			t.Errorf("Close after Open(%q): %v", raw, cerr)
		}
		return
	}
	msg := err.Error()
	assert.False(t, strings.ContainsAny(msg, "\n\r"), "Open(%q): error of several lines: %q", raw, msg)
	if !errors.Is(err, distlock.ErrInvalidOption) && !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("Open(%q): %v wraps neither ErrInvalidOption nor ErrUnavailable", raw, err)
	}
	if u, perr := url.Parse(raw); perr == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && len(pw) >= 4 && strings.Contains(msg, pw) && showsPassword(u, pw, msg) {
			t.Errorf("Open(%q): error shows the password %q: %s", raw, pw, msg)
		}
	}
}

// showsPassword reports whether msg, the error of opening u, holds pw more
// often than the error of opening u with another password of the same
// length: a password that is also part of the message's fixed text (the
// backend's name "postgres" holds the password "gres") is not shown by it.
func showsPassword(u *url.URL, pw, msg string) bool {
	other := "Q"
	if strings.Contains(pw, other) {
		other = "Z"
	}
	v := *u
	name := u.User.Username()
	v.User = url.UserPassword(name, strings.Repeat(other, len([]rune(pw))))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	l, err := distlock.Open(ctx, v.String())
	if err == nil {
		l.Close()
		return true // the message came from the password itself
	}
	return strings.Count(msg, pw) > strings.Count(err.Error(), pw)
}

// TestPasswordInFixedText: a password that is part of the message's own
// text (the scheme "postgres" holds "gres") is not reported as shown (CI
// failed on this input: FuzzOpen/c086126e1865c9db); a password the
// message really shows still is.
func TestPasswordInFixedText(t *testing.T) {
	u, _ := url.Parse("postgres://:gres@")
	assert.False(t, showsPassword(u, "gres", "postgres: open: invalid option: want postxxxxx://user:password@host:5432/database"), "the backend's name counted as the password")
	u, _ = url.Parse("postgres://:secret@")
	assert.True(t, showsPassword(u, "secret", "postgres: open: password secret rejected"), "a shown password not reported")
}

// TestControlCharactersInFragmentOneLine: url.Parse lets raw control
// characters through in the fragment, and percent-decoding makes them in
// the path, user and query; every scheme's error must still be one line
// (CI's FuzzOpen found "redis:#\r").
func TestControlCharactersInFragmentOneLine(t *testing.T) {
	for _, s := range backend.Schemes() {
		for _, raw := range []string{s + ":#\r", s + "://127.0.0.1:1/x#a\nb", s + "://127.0.0.1:1#\x00",
			s + "://127.0.0.1:1/x?%0A=1", s + "://127.0.0.1:1/x?prefix=%0D%0A", s + "://127.0.0.1:1/x?timeout=%0A",
			s + "://127.0.0.1:1/x%0Ay", s + "://u%0A:p@127.0.0.1:1/x", s + "://127.0.0.1:1/x?mode=%0A&table=%0D"} {
			checkOpen(t, raw)
		}
	}
}
