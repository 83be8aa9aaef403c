package distlock

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/distlock/distlock/backend"
)

// sentinels are the errors that already say what a driver's error means.
var sentinels = []error{ErrNotAcquired, ErrNotHeld, ErrUnavailable, ErrAuth, ErrMisconfigured, ErrClosed, ErrInvalidTTL, ErrInvalidOption, ErrInvalidKey,
	context.Canceled, context.DeadlineExceeded}

// classify wraps an error returned by the driver once, in the sentinel of
// its code (backend.ErrorClassifier; without one, network errors are
// transient), unless it already wraps a sentinel or a ctx error. This is
// the one place where a driver's own errors get their portable meaning.
func (l *Locker) classify(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return err
		}
	}
	code := backend.CodeUnknown
	if l.classifier != nil {
		code = l.classifier.ErrorCode(err)
	} else if networkError(err) {
		code = backend.CodeTransient
	}
	return backend.Wrap(code, err)
}

// networkError reports whether err comes from the connection itself.
func networkError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
