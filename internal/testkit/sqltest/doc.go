// Package sqltest holds what the tests of the SQL backends (mysql,
// postgres) share: the server most tests use, started on first use (so
// tests that need none start none), unique table names, the conformance
// harness of a mode, the no-leak scenario and the benchmarks. It is
// imported only by tests.
package sqltest
