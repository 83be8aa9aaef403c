// Package permittest checks what a SQL driver's permits (sqllock.Permits)
// send to the server, for the tests of the SQL backends. It is imported
// only by tests.
package permittest
