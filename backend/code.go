package backend

import (
	"errors"
	"fmt"
)

// Code is the portable meaning of a driver's error. A driver classifies its
// client's errors once, in one ErrorCode method (see ErrorClassifier), and
// package distlock wraps each error once, in the sentinel of its code.
type Code uint8

const (
	// CodeUnknown: no portable meaning; the error is returned as it is.
	CodeUnknown Code = iota
	// CodeNotAcquired: another owner holds the lock (ErrNotAcquired).
	CodeNotAcquired
	// CodeNotHeld: the lock is gone or another owner's (ErrNotHeld).
	CodeNotHeld
	// CodeLockLost: the lock ended without Release (ErrLockLost).
	CodeLockLost
	// CodeUnavailable: the backend cannot be reached or cannot decide,
	// and waiting will not cure it: a TLS failure, a host name that does
	// not resolve, an unexpected server reply (ErrUnavailable).
	CodeUnavailable
	// CodeTransient: the backend cannot be reached or cannot decide for
	// now: a refused or reset connection, a timeout, a server loading or
	// failing over, a lost quorum of such answers (ErrUnavailable;
	// distlock.WithRetryUnavailable waits these out).
	CodeTransient
	// CodeClosed: the driver or its client was closed (ErrClosed).
	CodeClosed
	// CodeInvalidTTL: the backend cannot honour the TTL (ErrInvalidTTL).
	CodeInvalidTTL
	// CodeInvalidOption: a parameter is unusable (ErrInvalidOption).
	CodeInvalidOption
	// CodeAuth: the server refused the credentials or a permission the
	// operation needs: a wrong or missing password, an unknown user, an
	// ACL or privilege that does not allow the command (ErrAuth). Never
	// ErrUnavailable: retrying cannot help.
	CodeAuth
	// CodeMisconfigured: the server is reachable and accepted us, but is
	// not set up as the Locker expects: a missing database, schema or lock
	// table (ErrMisconfigured). Never ErrUnavailable: retrying cannot help.
	CodeMisconfigured
)

// Sentinels of the two classes that say what to fix rather than when to
// retry. Package distlock re-exports them under the same names.
var (
	// ErrAuth: the backend refused the credentials or a permission (a
	// wrong or missing password, an unknown user, an ACL that forbids the
	// command). Fix the user and password in the URL or the server's
	// ACL/grants. It does not wrap ErrUnavailable: retrying cannot help.
	ErrAuth = errors.New("backend refused the credentials or permission (check the user and password in the backend URL, and the server's ACL or grants)")
	// ErrMisconfigured: the backend answered but is not set up for the
	// Locker: a missing database, schema or lock table. Fix the URL or
	// create what is missing. It does not wrap ErrUnavailable.
	ErrMisconfigured = errors.New("backend not set up for distlock (check the database named in the URL, and that the lock table exists)")
)

// ErrorClassifier is implemented by drivers that return their client's
// errors without wrapping a sentinel. ErrorCode classifies an error returned
// by any method of the driver or of its locks; it is called at most once per
// error, only for errors that wrap none of the sentinels (and no ctx error),
// and must not block. Fallback without it: such errors get CodeTransient if
// they come from the network (net.Error, io.EOF, io.ErrUnexpectedEOF),
// CodeUnknown otherwise.
type ErrorClassifier interface {
	ErrorCode(err error) Code
}

// Sentinel returns the sentinel error of code, nil for CodeUnknown.
func (c Code) Sentinel() error {
	switch c {
	case CodeNotAcquired:
		return ErrNotAcquired
	case CodeNotHeld:
		return ErrNotHeld
	case CodeLockLost:
		return ErrLockLost
	case CodeUnavailable, CodeTransient:
		return ErrUnavailable
	case CodeClosed:
		return ErrClosed
	case CodeInvalidTTL:
		return ErrInvalidTTL
	case CodeInvalidOption:
		return ErrInvalidOption
	case CodeAuth:
		return ErrAuth
	case CodeMisconfigured:
		return ErrMisconfigured
	}
	return nil
}

// TransientError marks an ErrUnavailable that waiting may cure
// (CodeTransient). It wraps ErrUnavailable and the driver's error.
type TransientError struct{ Err error }

func (e *TransientError) Error() string { return fmt.Sprintf("%v: %v", ErrUnavailable, e.Err) }

// Unwrap returns ErrUnavailable and the driver's error.
func (e *TransientError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

// Wrap returns err wrapped in the sentinel of code (a *TransientError for
// CodeTransient), on one line; err itself for CodeUnknown, for a nil err,
// or when err already wraps that sentinel.
func Wrap(code Code, err error) error {
	s := code.Sentinel()
	if err == nil || s == nil {
		return err
	}
	if code == CodeTransient {
		var te *TransientError
		if errors.As(err, &te) {
			return err
		}
		return &TransientError{Err: err}
	}
	if errors.Is(err, s) {
		return err
	}
	return fmt.Errorf("%w: %w", s, err)
}

// IsTransient reports whether err is an ErrUnavailable that waiting may cure.
func IsTransient(err error) bool {
	var te *TransientError
	return errors.As(err, &te)
}
