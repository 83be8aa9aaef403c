#!/usr/bin/env bash
# run-all.sh MAIN OTHER...: runs every command line at once (with bash -c).
# MAIN's output streams; each OTHER's is kept and printed, whole, once MAIN
# has ended and it has too. Fails if any failed, naming each.
set -uo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
main=$1
shift
pids=()
for i in $(seq 1 $#); do
	bash -c "${!i}" >"$dir/$i.out" 2>&1 &
	pids+=($!)
done
failed=()
bash -c "$main" || failed+=("$main (exit $?)")
for i in $(seq 1 $#); do
	status=0
	wait "${pids[$((i - 1))]}" || status=$?
	echo "=== ${!i}"
	cat "$dir/$i.out"
	((status == 0)) || failed+=("${!i} (exit $status)")
done
if ((${#failed[@]} > 0)); then
	printf 'FAILED: %s\n' "${failed[@]}" >&2
	exit 1
fi
