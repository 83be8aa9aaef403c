package openfuzz

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/distlock/distlock/backend"
	"github.com/stretchr/testify/require"
)

// TestEveryRegisteredSchemeHasAnImportHint: the unknown-scheme error names
// the package to import for every scheme distlock's packages register
// (etcd's was missing: `unknown backend scheme "etcd"` with no hint).
func TestEveryRegisteredSchemeHasAnImportHint(t *testing.T) {
	for _, s := range backend.Schemes() {
		if backend.ImportPath(s) == "" {
			t.Errorf("scheme %s: no import path for the unknown-scheme hint", s)
		}
	}
}

// TestExamplesImportEveryBackendTheyOffer: an example whose -backend flag
// takes any URL registers every backend package (examples/leader lacked
// etcd, the otel Prometheus example had only memory).
func TestExamplesImportEveryBackendTheyOffer(t *testing.T) {
	want := map[string]bool{}
	for _, s := range backend.Schemes() {
		want[backend.ImportPath(s)] = true
	}
	files, _ := filepath.Glob("../../../examples/*/main.go")
	more, _ := filepath.Glob("../../../otel/examples/*/main.go")
	files = append(files, more...)
	if len(files) < 3 {
		t.Fatalf("found only %d examples", len(files))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		if !strings.Contains(string(src), `"backend"`) {
			continue // no -backend flag: the example names its backend
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		require.NoError(t, err)
		have := map[string]bool{}
		for _, im := range file.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			have[p] = true
		}
		var missing []string
		for p := range want {
			if !have[p] {
				missing = append(missing, p)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("%s takes -backend but does not import %v", f, missing)
		}
	}
}
