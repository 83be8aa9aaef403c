package distlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docNames matches the names the README and docs/ give in code spans:
// distlock.Name, locker.Method( and a bare NewName(.
var docNames = regexp.MustCompile("`(?:distlock\\.([A-Z]\\w*)|locker\\.([A-Z]\\w*)\\(|(New[A-Z]\\w*)\\()")

// TestDocsNameExistingAPI: every distlock.Name, locker.Method( and bare
// NewName( in a code span of README.md and docs/*.md is an exported name
// of package distlock (a function, type, variable or constant), or a
// method of *Locker for locker.Method(, or the name of a span of the otel
// module: a renamed API leaves no stale name for a newcomer to copy.
func TestDocsNameExistingAPI(t *testing.T) {
	pkg, methods := exportedNames(t)
	otelSrc, err := filepath.Glob("otel/*.go")
	require.NoError(t, err)
	for _, f := range otelSrc {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`"distlock\.([A-Z]\w*)"`).FindAllStringSubmatch(string(b), -1) {
			pkg[m[1]] = true // a span name
		}
	}
	files, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	for _, f := range append(files, "README.md") {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range docNames.FindAllStringSubmatch(string(b), -1) {
			switch {
			case m[1] != "":
				require.Truef(t, pkg[m[1]], "%s: %s names no exported name of package distlock", f, m[0])
			case m[2] != "":
				require.Truef(t, methods[m[2]], "%s: %s names no method of *distlock.Locker", f, m[0])
			case m[3] != "":
				if !pkg[m[3]] && !strings.HasPrefix(f, "docs/backends") {
					require.Failf(t, "stale name", "%s: %s names no exported function of package distlock", f, m[0])
				}
			}
		}
	}
}

// exportedNames returns the exported top-level names of package distlock
// and the methods of Locker, read from its source files.
func exportedNames(t *testing.T) (pkg, lockerMethods map[string]bool) {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	require.NoError(t, err)
	pkg, lockerMethods = map[string]bool{}, map[string]bool{}
	for _, f := range pkgs["distlock"].Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					pkg[d.Name.Name] = true
				} else if recvName(d.Recv.List[0].Type) == "Locker" {
					lockerMethods[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						pkg[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							pkg[n.Name] = true
						}
					}
				}
			}
		}
	}
	return pkg, lockerMethods
}

func recvName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
