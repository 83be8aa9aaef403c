#!/usr/bin/env bash
# test-packages.sh: every package of the module (go list ./...), the ones
# whose tests take minutes first, so that `go test -p N` starts them at
# once instead of leaving the longest for last. Order only: the set is
# exactly go list ./.... One line, space-separated: the Makefile passes it
# inside a command string (scripts/run-all.sh runs it with bash -c, where a
# newline would end the go test command).
set -euo pipefail
slow=(redis postgres memcached zookeeper mysql etcd redlock cmd/distlock conformance internal/tests/jobs file internal/testkit/testserver)
mod=$(go list -m)
all=$(go list ./...)
{
	for p in "${slow[@]}"; do
		if grep -qx "$mod/$p" <<<"$all"; then echo "$mod/$p"; fi
	done
	grep -vxF -f <(printf "$mod/%s\n" "${slow[@]}") <<<"$all"
} | paste -sd' ' -
