package backend

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://:Hunter2@h:6379/0":   "redis://:xxxxx@h:6379/0",
		"redis://user:pa#ss@h:6379/0": "redis://user:xxxxx@h:6379/0",
		"mysql://root:a@b@h:3306/db":  "mysql://root:xxxxx@h:3306/db",
		"redis://user@h:6379/0":       "redis://user@h:6379/0",
		"redis://h:6379/0":            "redis://h:6379/0",
		"root:secret@tcp(h:3306)/db":  "root:xxxxx@tcp(h:3306)/db",
		"redis://:p@h":                "redis://:xxxxx@h",
		"not a url at all":            "not a url at all",
	} {
		assert.Equal(t, want, RedactURL(raw), "RedactURL(%q)", raw)
	}
}

func TestScrubError(t *testing.T) {
	raw := "redis://:123#Hunter2secret@h:6379/0"
	err := fmt.Errorf("%w: fragment (#Hunter2secret@h:6379/0) and port 123", ErrInvalidOption)
	got := ScrubError(raw, err)
	if strings.Contains(got.Error(), "Hunter2") || strings.Contains(got.Error(), "123") || !errors.Is(got, ErrInvalidOption) {
		t.Errorf("ScrubError = %v", got)
	}
	clean := fmt.Errorf("%w: nothing secret", ErrUnavailable)
	if ScrubError(raw, clean) != clean {
		t.Error("ScrubError changed an error that shows no password")
	}
	assert.Equal(t, "invalid option: a bad value", Scrub("redis://:a@h/0", "invalid option: a bad value"), "a one-byte password garbled the message")
}

// TestScrubShortPiece: a password piece of 1 or 2 bytes that url.Parse
// quotes in its error is masked; quoted text elsewhere is kept.
func TestScrubShortPiece(t *testing.T) {
	raw := "redis://:ab#cdefgh@h:6379/0"
	got := Scrub(raw, `malformed URL "redis://:xxxxx@h:6379/0": invalid port ":ab" after host`)
	assert.Equal(t, `malformed URL "redis://:xxxxx@h:6379/0": invalid port "xxxxx" after host`, got, "Scrub")
}
