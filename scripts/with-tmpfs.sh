#!/usr/bin/env bash
# with-tmpfs.sh CMD...: runs CMD with TMPDIR on a fresh directory in
# /dev/shm when the machine has a writable tmpfs there, and removes it
# afterwards. The test servers keep their data in temporary directories;
# on a VM disk every fsync (etcd's raft log, ZooKeeper's, MariaDB's redo
# log, Redis's AOF) costs ~10 ms, on tmpfs nothing. A server's data still
# survives the process restarts the tests make.
set -euo pipefail
if [[ -d /dev/shm && -w /dev/shm ]] && dir=$(mktemp -d /dev/shm/distlock-test.XXXXXX 2>/dev/null); then
	chmod 755 "$dir" # PostgreSQL runs as an unprivileged user: it must traverse it
	trap 'rm -rf "$dir"' EXIT
	export TMPDIR="$dir"
fi
"$@"
