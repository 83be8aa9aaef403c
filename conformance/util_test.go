package conformance_test

import "regexp"

// memName turns a test name into a mem:// namespace name.
func memName(testName string) string {
	return regexp.MustCompile(`[^a-zA-Z0-9]`).ReplaceAllString(testName, "-")
}

func mustRe(s string) *regexp.Regexp { return regexp.MustCompile(s) }
