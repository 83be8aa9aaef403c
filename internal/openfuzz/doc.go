// Package openfuzz holds the tests that feed distlock.Open every registered
// scheme: a native fuzz test (FuzzOpen) and the table of malformed URLs
// whose password must appear in no error. It has no code of its own.
package openfuzz
