// Command distlock runs commands under a distributed lock, checks a lock
// backend against the distlock contract, and measures it.
//
//	distlock run --backend URL --key KEY [--ttl D] [--wait D | --no-wait] [--owner ID] [--metadata S] [--grace D] -- CMD [ARGS…]
//	distlock status [--backend URL] [--json] KEY...
//	distlock unlock --force [--yes] [--backend URL] KEY
//	distlock conformance [--backend URL] [--run REGEXP] [--destructive] [--ttl D] [--json]
//	distlock bench [--backend URL] [--clients N] [--keys K] [--duration D] [--json]
//	distlock demo [--local]
//
// --backend defaults to $DISTLOCK_BACKEND. run requires a backend shared
// between processes (it refuses the in-process mem://); conformance and
// bench fall back to mem://. Exit statuses are listed in exitcodes.go and
// the README.
package main
