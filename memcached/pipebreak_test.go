package memcached

import (
	"bufio"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testkit/testserver"
)

// readVersion reads the reply of "version".
func readVersion(r *bufio.Reader) error {
	_, err := readLine(r)
	return err
}

// A panic in a lone request's reply reader, recovered by its caller, must
// not leave the pipe busy for ever: the next request goes out and is
// answered.
func TestPipePanicInOwnRequestFreesPipe(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	_, _, p := gatedDriver(t, srv)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the reader's panic did not reach the caller")
			}
		}()
		_ = p.do(ctxT(t, 10*time.Second), []byte("version\r\n"), func(*bufio.Reader) error { panic("reader panics") })
	}()
	if err := p.do(ctxT(t, 5*time.Second), []byte("version\r\n"), readVersion); err != nil {
		t.Fatalf("the request after a recovered panic: %v (busy %v)", err, p.q.Busy())
	}
}
