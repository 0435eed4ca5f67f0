#!/usr/bin/env bash
# services.sh — run a command with Redis and PostgreSQL available.
#
#   scripts/services.sh <command> [args…]
#
# For each of REDIS_URL and DATABASE_URL that is not already set, it starts a
# private server (temporary directory, free loopback port), exports the URL,
# runs the command, and stops what it started when the command ends. Servers
# named by a URL are used as they are and never touched otherwise.
#
# SERVICES names the servers the command needs: "redis postgres" (the
# default), or one of them.
#
# Missing packages (redis-server, postgresql) are installed with apt when
# running as root; otherwise it stops and names them.
set -euo pipefail

if [ $# -eq 0 ]; then
	echo "usage: $0 <command> [args…]" >&2
	exit 2
fi

log() { echo "services: $*" >&2; }

apt_updated=
need_package() { # need_package <package> <binary test…>
	local pkg=$1
	shift
	if "$@" >/dev/null 2>&1; then return 0; fi
	if [ "$(id -u)" != 0 ]; then
		log "$pkg is not installed; install it (apt-get install $pkg) or set the URL of a running server"
		exit 1
	fi
	log "installing $pkg"
	if [ -z "$apt_updated" ]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >&2
	# The package starts its own cluster; we only want the binaries.
	if command -v systemctl >/dev/null 2>&1; then systemctl stop "$pkg" >/dev/null 2>&1 || true; fi
	if [ "$pkg" = postgresql ]; then pg_ctlcluster --help >/dev/null 2>&1 && pg_lsclusters -h 2>/dev/null | while read -r ver name _; do pg_ctlcluster "$ver" "$name" stop >/dev/null 2>&1 || true; done; fi
	if [ "$pkg" = redis-server ]; then service redis-server stop >/dev/null 2>&1 || true; fi
}

# Ports are taken below the kernel's ephemeral range, so the many outgoing
# connections of a load test cannot be holding the one a server is about to
# bind.
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$ephemeral_low" -gt 11000 ] 2>/dev/null || ephemeral_low=32768

# ready <pid> <command…>: waits up to 10 s for the command to succeed, while
# the server <pid> is still running; fails otherwise.
ready() {
	local pid=$1
	shift
	for _ in $(seq 1 100); do
		"$@" >/dev/null 2>&1 && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	"$@" >/dev/null 2>&1
}

free_port() {
	local port
	for _ in $(seq 1 50); do
		port=$((10000 + RANDOM % (ephemeral_low - 10000)))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	log "no free port found"
	exit 1
}

pg_bindir() {
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		if [ -x "$d/initdb" ] && [ -x "$d/postgres" ]; then
			echo "$d"
			return 0
		fi
	done
	if command -v initdb >/dev/null 2>&1; then
		dirname "$(readlink -f "$(command -v initdb)")"
		return 0
	fi
	return 1
}

# The servers run in sessions of their own: a Ctrl-C at the terminal reaches
# the command, which may still need them to clean up (drop its database), and
# the servers stop after it, in cleanup.
started=()
workdir=$(mktemp -d -t waitroom-services.XXXXXX)
chmod 755 "$workdir"

cleanup() {
	local rc=$?
	for pid in "${started[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${started[@]}"; do
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -rf "$workdir"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

services=" ${SERVICES:-redis postgres} "

if [ -z "${REDIS_URL:-}" ] && [[ $services == *" redis "* ]]; then
	need_package redis-server command -v redis-server
	mkdir -p "$workdir/redis"
	# A port can still be taken between the check and the bind: try another.
	for attempt in 1 2 3; do
		port=$(free_port)
		# noeviction: an evicted seat counter is an oversell.
		setsid redis-server --bind 127.0.0.1 --port "$port" --dir "$workdir/redis" \
			--save '' --appendonly no --maxmemory-policy noeviction \
			--logfile "$workdir/redis/redis.log" --daemonize no &
		pid=$!
		started+=($pid)
		ready "$pid" timeout 2 redis-cli -p "$port" ping && break
		kill -TERM "$pid" 2>/dev/null || true
		[ "$attempt" = 3 ] && { log "redis-server did not start"; cat "$workdir/redis/redis.log" >&2; exit 1; }
		log "redis-server did not start on port $port; trying another"
	done
	export REDIS_URL="redis://127.0.0.1:$port/0"
	log "redis at $REDIS_URL"
fi

if [ -z "${DATABASE_URL:-}" ] && [[ $services == *" postgres "* ]]; then
	need_package postgresql pg_bindir
	bindir=$(pg_bindir)
	pgdata="$workdir/pg"
	mkdir -p "$pgdata"
	run_pg=()
	if [ "$(id -u)" = 0 ]; then
		# initdb and postgres refuse to run as root.
		chown postgres:postgres "$pgdata"
		run_pg=(runuser -u postgres --)
	fi
	"${run_pg[@]}" "$bindir/initdb" -D "$pgdata/data" -U postgres -A trust -E UTF8 --no-sync >"$workdir/initdb.log" 2>&1 ||
		{ log "initdb failed"; cat "$workdir/initdb.log" >&2; exit 1; }
	for attempt in 1 2 3; do
		port=$(free_port)
		setsid "${run_pg[@]}" "$bindir/postgres" -D "$pgdata/data" -p "$port" -k "$pgdata" \
			-c listen_addresses=127.0.0.1 -c max_connections=300 \
			-c shared_buffers=256MB ${PG_EXTRA_OPTS:-} >"$workdir/postgres.log" 2>&1 &
		pid=$!
		started+=($pid)
		ready "$pid" "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" && break
		kill -TERM "$pid" 2>/dev/null || true
		[ "$attempt" = 3 ] && { log "postgres did not start"; cat "$workdir/postgres.log" >&2; exit 1; }
		log "postgres did not start on port $port; trying another"
	done
	export DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	log "postgres at $DATABASE_URL"
fi

"$@"
