package openfuzz

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

// TestShortPasswordPiecesHidden: on every registered scheme, a password
// whose first piece is 1 or 2 bytes long, cut by a character url.Parse
// splits at ("redis://:ab#cdefgh@h"), shows none of its pieces in Open's
// error (url.Parse's `invalid port ":ab"` showed the first two bytes, and
// `invalid URL escape "%zz"` a piece of "a%zzb").
func TestShortPasswordPiecesHidden(t *testing.T) {
	heads := []string{"Qj", "Xq", "J"}
	cuts := []string{"#", "?", "/", "@", ":", "%zz", "%"}
	hosts := []string{"127.0.0.1:1", "127.0.0.1:1,127.0.0.1:2", ""}
	n := 0
	for _, scheme := range backend.Schemes() {
		for _, head := range heads {
			for _, cut := range cuts {
				for _, host := range hosts {
					for _, user := range []string{"", "u"} {
						tail := "Vwq" + cut + "Kzy"
						raw := scheme + "://" + user + ":" + head + cut + tail + "@" + host + "/db"
						n++
						ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
						l, err := distlock.Open(ctx, raw)
						cancel()
						if err == nil {
							l.Close()
							continue
						}
						msg := err.Error()
						for _, piece := range []string{head, "Vwq", "Kzy", strings.TrimPrefix(cut, "%")} {
							if len(piece) >= 2 && strings.Contains(msg, piece) && !strings.Contains(scheme, piece) {
								t.Errorf("Open(%q): error shows %q: %s", raw, piece, msg)
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d URLs", n)
}
