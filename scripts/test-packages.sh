#!/usr/bin/env bash
# test-packages.sh [all|slow|rest]: the packages of the module (go list
# ./...) to test. all (the default): every one, the ones whose tests take
# minutes first, so that `go test -p N` starts them at once instead of
# leaving the longest for last. slow: only those, in that order. rest: every
# other one (seconds each, mostly the link of its test binary). slow and
# rest split all: the Makefile tests them as two go test runs at once.
# Order only: the set of all is exactly go list ./.... One line,
# space-separated: the Makefile passes it inside a command string
# (scripts/run-all.sh runs it with bash -c, where a newline would end the go
# test command).
set -euo pipefail
which=${1:-all}
slow=(redis postgres mysql memcached zookeeper redlock etcd cmd/distlock conformance internal/tests/jobs)
mod=$(go list -m)
all=$(go list ./...)
slowList() {
	for p in "${slow[@]}"; do
		if grep -qx "$mod/$p" <<<"$all"; then echo "$mod/$p"; fi
	done
}
restList() { grep -vxF -f <(printf "$mod/%s\n" "${slow[@]}") <<<"$all"; }
case $which in
all) { slowList; restList; } | paste -sd' ' - ;;
slow) slowList | paste -sd' ' - ;;
rest) restList | paste -sd' ' - ;;
*)
	echo "test-packages.sh: unknown set $which (want all, slow or rest)" >&2
	exit 2
	;;
esac
