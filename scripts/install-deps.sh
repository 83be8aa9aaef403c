#!/usr/bin/env bash
# Installs the servers the test suite starts by itself (internal/testkit/testserver):
# redis-server + redis-cli, memcached, ZooKeeper (java + Debian jars) and
# MariaDB, PostgreSQL and etcd. Idempotent: does nothing but print versions when all are present.
#
# The tests start private servers on random loopback ports, so the system
# services that apt may start are not needed; services that this script
# installs are stopped and disabled again.
set -euo pipefail

PACKAGES=(redis-server redis-tools memcached zookeeper mariadb-server postgresql etcd-server)
# mariadbd and mariadb-install-db may live in /usr/sbin, outside a user's PATH.
export PATH="$PATH:/usr/sbin:/sbin"

missing=()
for bin in redis-server redis-cli memcached mariadbd mariadb-install-db java etcd; do
	command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
done
[[ -f /usr/share/java/zookeeper.jar ]] || missing+=("/usr/share/java/zookeeper.jar")
# initdb and postgres live in /usr/lib/postgresql/<version>/bin on Debian.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null 2>&1 || missing+=("initdb (postgresql)")

if ((${#missing[@]} > 0)); then
	echo "install-deps: missing: ${missing[*]}"
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "install-deps: apt-get not found; install the equivalents of: ${PACKAGES[*]}" >&2
		exit 1
	fi
	SUDO=()
	if [[ $(id -u) -ne 0 ]]; then
		if command -v sudo >/dev/null 2>&1; then
			SUDO=(sudo)
		else
			echo "install-deps: not root and sudo not found; run as root: apt-get install -y ${PACKAGES[*]}" >&2
			exit 1
		fi
	fi

	# Remember which services were there before, so we only stop ours.
	newly=()
	for pkg in redis-server memcached zookeeper mariadb-server postgresql etcd-server; do
		if [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" != *'install ok installed'* ]]; then
			newly+=("$pkg")
		fi
	done

	"${SUDO[@]}" apt-get update
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${PACKAGES[@]}"

	# The tests never use the system services: stop the ones apt just
	# started (if there is an init system to ask) so they don't hold the
	# default ports and memory.
	for pkg in "${newly[@]}"; do
		case "$pkg" in
		mariadb-server) svc=mariadb ;;
		etcd-server) svc=etcd ;;
		*) svc=$pkg ;;
		esac
		if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
			"${SUDO[@]}" systemctl disable --now "$svc" >/dev/null 2>&1 || true
		elif command -v service >/dev/null 2>&1; then
			"${SUDO[@]}" service "$svc" stop >/dev/null 2>&1 || true
		fi
	done
fi

echo "install-deps: versions"
# sed, not head: under pipefail a reader that exits first fails the script
# with the writer's SIGPIPE (exit 141) whenever it wins the race.
redis-server --version
redis-cli --version
memcached -V
mariadbd --version
java -version 2>&1 | sed -n 1p
pg=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
"${pg:-/usr/bin}/postgres" --version
etcd --version | sed -n 1p
echo "zookeeper $(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo '(jar present, version unknown)')"
