// Package conformance is the suite that proves a distlock backend keeps the
// contract: mutual exclusion, owner-checked release and refresh, expiry,
// reentrancy, fencing, context handling, key and TTL validation, Close, and
// every capability the backend claims.
//
// The checks are plain functions over a Harness, in the manner of
// testing/fstest: Run executes them as subtests of a Go test, and RunChecks
// executes them without package testing (the distlock CLI uses it against a
// user's own servers) and reports a Result per check.
//
// A check that cannot run — a capability the backend does not claim, a fault
// the harness cannot inject — is skipped with the reason.
package conformance
