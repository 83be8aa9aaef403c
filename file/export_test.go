package file

import "github.com/distlock/distlock/backend"

var zeroHolder backend.Holder
