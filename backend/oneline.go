package backend

import "strings"

// OneLine returns err with a message on one line: line breaks (and the tabs
// that indent continuation lines, as in pgx's connection errors) become
// "; ". The result still unwraps to err, so errors.Is and errors.As see
// everything err matched. nil stays nil, and an error already on one line
// is returned as it is.
func OneLine(err error) error {
	if err == nil || !strings.ContainsAny(err.Error(), "\r\n") {
		return err
	}
	return oneLine{err}
}

type oneLine struct{ err error }

func (e oneLine) Error() string {
	lines := strings.FieldsFunc(e.err.Error(), func(r rune) bool { return r == '\n' || r == '\r' })
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "; ")
}

func (e oneLine) Unwrap() error { return e.err }
