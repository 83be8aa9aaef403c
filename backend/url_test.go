package backend

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHosts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		bad  bool
	}{
		{"redlock://h1:1,h2,h3:3", "h1:1 h2:6379 h3:3", false},
		{"redlock://u:p@h1:6379,h2/0?x=1", "h1:6379 h2:6379", false},
		{"redis://[::1]:3", "[::1]:3", false},
		{"redis://[::1]", "[::1]:6379", false},
		{"redlock://h1:1,,h2", "", true},
		{"redlock://:1", "", true},
		{"redlock://h1:x1", "", true},
		{"redlock://h1:1,h2:x", "", true},
	} {
		u, err := ParseURL(tc.in)
		if err != nil {
			assert.True(t, tc.bad, "parse %q: %v", tc.in, err)
			continue
		}
		hosts, err := Hosts(u, "6379")
		if tc.bad {
			assert.ErrorIs(t, err, ErrInvalidOption, "Hosts(%q) = %v", tc.in, hosts)
			continue
		}
		if err != nil || strings.Join(hosts, " ") != tc.want {
			t.Errorf("Hosts(%q) = %v, %v; want %s", tc.in, hosts, err, tc.want)
		}
	}
}
