package backend

// Aser is implemented by drivers that expose what lies below them:
// distlock.Locker.As calls As with the user's target, a non-nil pointer.
// As sets *target to the driver's value of that type (its client, or a
// handle the backend package exports for its extras) and reports true, or
// reports false and leaves target alone. It never panics, whatever the
// target. Without it: Locker.As reports false for every target.
type Aser interface {
	As(target any) bool
}
