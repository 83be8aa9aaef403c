package fence

import (
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// ErrStale is what every guard's refusal satisfies (errors.Is): the write
// carried a token lower than the highest the resource has recorded, so a
// newer lease has written since, and the write was not applied. The error is
// a *StaleError carrying both tokens.
var ErrStale = errors.New("fence: stale token")

// ErrZeroToken is returned, and nothing is written, for token 0: the lease
// came from a backend without fencing tokens (Capabilities().Fencing false:
// memcached, Redlock), whose writes a guard cannot order.
var ErrZeroToken = errors.New("fence: token 0: the lock backend gives no fencing tokens (Capabilities().Fencing is false)")

// ErrTokenRange is returned for a token above math.MaxInt64, which the SQL
// token columns (BIGINT) cannot hold.
var ErrTokenRange = errors.New("fence: token above 9223372036854775807")

// ErrInvalidResource is returned for a resource name that is empty, longer
// than 1024 bytes or not valid UTF-8 (the rules of distlock lock keys).
var ErrInvalidResource = errors.New("fence: invalid resource name")

// ErrInvalidIdentifier is returned by the SQL constructors for a table or
// column name that is not a plain identifier (see NewSQL).
var ErrInvalidIdentifier = errors.New("fence: invalid SQL identifier")

// ErrInvalidArgument is returned for a malformed call: a negative TTL, an
// odd number of HSet values, a nil Script.
var ErrInvalidArgument = errors.New("fence: invalid argument")

// ErrNoRow is returned by a token-column guard when the protected row does
// not exist: it guards rows, it does not create them.
var ErrNoRow = errors.New("fence: protected row not found")

// StaleError is a refused write. errors.Is(err, ErrStale) reports it.
type StaleError struct {
	Resource string
	Token    uint64 // the refused write's token
	Highest  uint64 // the highest token the resource had recorded
}

// Error says which token was refused and which one had written.
func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale token %d for %q: token %d already wrote", e.Token, e.Resource, e.Highest)
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// maxResource is the longest resource name, as for distlock keys.
const maxResource = 1024

// checkWrite validates what every guard gets before it touches the store.
func checkWrite(resource string, token uint64) error {
	if token == 0 {
		return ErrZeroToken
	}
	if resource == "" || len(resource) > maxResource || !utf8.ValidString(resource) {
		return fmt.Errorf("%w: %d bytes, valid UTF-8 %t (want 1 to %d bytes of UTF-8)", ErrInvalidResource, len(resource), utf8.ValidString(resource), maxResource)
	}
	return nil
}

// checkSQLToken adds the BIGINT bound of the SQL guards.
func checkSQLToken(resource string, token uint64) error {
	if err := checkWrite(resource, token); err != nil {
		return err
	}
	if token > math.MaxInt64 {
		return ErrTokenRange
	}
	return nil
}
