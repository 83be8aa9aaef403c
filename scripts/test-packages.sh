#!/usr/bin/env bash
# test-packages.sh: every package of the module (go list ./...), the ones
# whose tests take minutes first, so that `go test -p N` starts them at
# once instead of leaving the longest for last. Order only: the set is
# exactly go list ./....
set -euo pipefail
slow=(postgres mysql redlock zookeeper memcached redis etcd cmd/distlock file internal/tests/jobs conformance)
mod=$(go list -m)
all=$(go list ./...)
for p in "${slow[@]}"; do
	grep -qx "$mod/$p" <<<"$all" && echo "$mod/$p"
done
grep -vxF -f <(printf "$mod/%s\n" "${slow[@]}") <<<"$all"
