#!/bin/sh
# fenced-install.sh SRC DIR NAME: install the finished file SRC as DIR/NAME
# only if $DISTLOCK_TOKEN is not below DIR's highest recorded token, and
# record the token. The shell form of fence.Dir.Install (same files, same
# flock), for jobs under distlock run. Exit 0 installed; 3 refused (a newer
# holder has written; SRC is removed); 64 token missing or 0.
set -eu
src=$1 dir=$2 name=$3
tok=${DISTLOCK_TOKEN:-0}
[ "$tok" -gt 0 ] || { echo "token 0: no fencing token from the lock backend" >&2; exit 64; }
exec 9>"$dir/.distlock-fence.lock"
flock -x 9
highest=$(cat "$dir/.distlock-fence" 2>/dev/null || echo 0)
if [ "$tok" -lt "$highest" ]; then
    rm -f "$src"
    echo "refused: token $tok, token $highest already wrote" >&2
    exit 3
fi
if [ "$tok" -gt "$highest" ]; then
    tmp="$dir/.distlock-fence-tmp-sh.$$"
    printf '%s\n' "$tok" >"$tmp"
    sync "$tmp"
    mv "$tmp" "$dir/.distlock-fence"
    sync "$dir"
fi
mv "$src" "$dir/$name"
sync "$dir"
