package backend

import (
	"context"
	"errors"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// A backend URL may carry a password, and users write passwords into URLs
// without escaping them ("redis://:pa#ss@h/0"), which url.Parse then splits
// at the wrong place: the pieces end up in the host, the fragment or an
// error message. The functions below treat as secret everything a reader
// could take for a password, whether or not the URL parses.

// secretSpan returns the part of raw that may hold a password: what lies
// between the first ':' of the userinfo and the last '@' after "://". It is
// generous on purpose (an '@' in the path or query widens it): it only
// decides what is hidden, never how the URL is parsed.
func secretSpan(raw string) (start, end int) {
	i := strings.Index(raw, "://")
	if i < 0 {
		// No scheme separator: "user:pass@host" or a DSN-like
		// "user:pass@tcp(h)/db". Anything before the last '@' after
		// the first ':' may be a password.
		at := strings.LastIndex(raw, "@")
		if at < 0 {
			return 0, 0
		}
		c := strings.Index(raw[:at], ":")
		if c < 0 {
			return 0, at // "secret@host": no way to tell user from password
		}
		return c + 1, at
	}
	rest := i + 3
	at := strings.LastIndex(raw[rest:], "@")
	if at < 0 {
		return 0, 0
	}
	at += rest
	c := strings.Index(raw[rest:at], ":")
	if c < 0 {
		return 0, 0 // user name only
	}
	return rest + c + 1, at
}

// secrets lists the strings that must not appear in anything shown: the
// password span, its unescaped form, and its pieces between the characters
// at which url.Parse cuts ('#', '?', '/', '@', ':', '%'), longest first;
// all of at least 3 bytes.
func secrets(raw string) []string {
	s, e := secretSpan(raw)
	if e <= s {
		return nil
	}
	span := raw[s:e]
	set := map[string]bool{span: true}
	if u, err := url.PathUnescape(span); err == nil {
		set[u] = true
	}
	for _, piece := range strings.FieldsFunc(span, func(r rune) bool { return strings.ContainsRune("#?/@:%", r) }) {
		if len(piece) >= 3 {
			set[piece] = true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		// Masking one or two characters everywhere would garble the
		// message; RedactURL still masks a short password in the URL.
		if len(k) >= 3 {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// Redacted is the mask that replaces a password.
const Redacted = "xxxxx"

// RedactURL returns raw with its password replaced by "xxxxx", whether or
// not raw parses as a URL. The result is safe to print.
func RedactURL(raw string) string {
	s, e := secretSpan(raw)
	if e <= s {
		return raw
	}
	return raw[:s] + Redacted + raw[e:]
}

// Scrub returns msg with every piece of raw's password replaced by "xxxxx":
// the pieces of at least 3 bytes wherever they appear, and any quoted
// string (as %q writes it) that is a part of raw overlapping the password,
// however short: url.Parse quotes what it cannot read, such as the
// `invalid port ":ab"` of "redis://:ab#cd@h" or the `invalid URL escape
// "%zz"` of a password "a%zzb".
func Scrub(raw, msg string) string {
	for _, sec := range secrets(raw) {
		msg = strings.ReplaceAll(msg, sec, Redacted)
	}
	s, e := secretSpan(raw)
	if e <= s {
		return msg
	}
	return quoted.ReplaceAllStringFunc(msg, func(q string) string {
		u, err := strconv.Unquote(q)
		if err != nil || !overlaps(raw, u, s, e) {
			return q
		}
		return strconv.Quote(Redacted)
	})
}

// quoted matches a double-quoted Go string literal.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// overlaps reports whether piece occurs in raw at a place that overlaps
// raw[s:e].
func overlaps(raw, piece string, s, e int) bool {
	if piece == "" {
		return false
	}
	for i := 0; i+len(piece) <= len(raw); {
		j := strings.Index(raw[i:], piece)
		if j < 0 {
			return false
		}
		at := i + j
		if at < e && at+len(piece) > s {
			return true
		}
		i = at + 1
	}
	return false
}

// ScrubError returns err unchanged if its message shows nothing of raw's
// password. Otherwise it returns an error with the scrubbed message that
// still matches the sentinel errors of this package and the context's with
// errors.Is, but no longer unwraps to the error that held the password.
func ScrubError(raw string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := Scrub(raw, msg)
	if clean == msg {
		return err
	}
	var keep []error
	for _, s := range sentinels {
		if errors.Is(err, s) {
			keep = append(keep, s)
		}
	}
	return &scrubbed{msg: clean, is: keep}
}

type scrubbed struct {
	msg string
	is  []error
}

func (e *scrubbed) Error() string   { return e.msg }
func (e *scrubbed) Unwrap() []error { return e.is }

// sentinels are the errors a scrubbed error still matches.
var sentinels = []error{
	ErrNotAcquired, ErrNotHeld, ErrLockLost, ErrInvalidKey, ErrInvalidTTL,
	ErrInvalidOption, ErrUnavailable, ErrAuth, ErrMisconfigured, ErrClosed, context.Canceled, context.DeadlineExceeded,
}
