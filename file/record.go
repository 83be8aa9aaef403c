package file

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// record is the content of a lock file (and of a semaphore's permit
// file): who holds it, written by the holder under the fence lock when it
// is granted, when its nested hold count changes, and (Held false) when it
// is released. The kernel lock, not the record, says whether the lock is
// held: a holder that died leaves its record behind.
type record struct {
	Held     bool      `json:"held"`
	Token    uint64    `json:"token"`
	Owner    string    `json:"owner,omitempty"`
	PID      int       `json:"pid,omitempty"`
	Host     string    `json:"host,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	Metadata string    `json:"metadata,omitempty"`
	Holds    int       `json:"holds,omitempty"`
}

func (r record) encode() []byte {
	b, _ := json.Marshal(r) // cannot fail: plain fields
	return append(b, '\n')
}

func decodeRecord(b []byte) (record, error) {
	var r record
	if len(strings.TrimSpace(string(b))) == 0 {
		return r, nil // a lock file never granted
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("corrupt lock record: %w", err)
	}
	return r, nil
}

// fence is the content of a .fence file: the last token granted for the
// key, and for a semaphore the permit count of its holders. It has a fixed
// width, so that an overwrite in place never leaves a longer old tail.
type fence struct {
	Last    uint64
	Permits int
}

const fenceLen = 20 + 1 + 7 + 1

func (f fence) encode() []byte {
	return fmt.Appendf(nil, "%020d %07d\n", f.Last, f.Permits)
}

func decodeFence(b []byte) (fence, error) {
	if len(b) == 0 {
		return fence{}, nil // created, never written
	}
	bad := func() (fence, error) {
		return fence{}, fmt.Errorf("corrupt fence file (%d bytes): refusing to issue a token that might repeat", len(b))
	}
	if len(b) != fenceLen || b[20] != ' ' || b[fenceLen-1] != '\n' {
		return bad()
	}
	last, err1 := strconv.ParseUint(string(b[:20]), 10, 64)
	permits, err2 := strconv.Atoi(string(b[21:28]))
	if err1 != nil || err2 != nil || permits < 0 {
		return bad()
	}
	return fence{Last: last, Permits: permits}, nil
}
