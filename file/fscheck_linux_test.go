package file

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMountInfoUnescape(t *testing.T) {
	require.Equal(t, "/mnt/my dir", unescapeMount(`/mnt/my\040dir`))
	require.Equal(t, "/plain", unescapeMount("/plain"))
}

// The directory of this test is on a local filesystem: checkFS lets it
// through, and a FUSE subtype lookup of it finds nothing to refuse.
func TestCheckFSLocal(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, checkFS(dir))
	require.False(t, unsafeFuse[fuseType(dir)])
}
