#!/usr/bin/env bash
# cluster.sh — run a command with a local Redis Cluster of three masters.
#
#   scripts/cluster.sh <command> [args…]
#
# Unless REDIS_CLUSTER_URL is already set, it starts three redis-server
# processes with cluster mode on (temporary directory, free loopback ports),
# joins them with `redis-cli --cluster create`, waits until every node
# reports cluster_state:ok, exports
#
#   REDIS_CLUSTER_URL=redis://127.0.0.1:<p1>?addr=127.0.0.1:<p2>&addr=127.0.0.1:<p3>
#
# (go-redis's cluster URL form, docs/api.md §14), runs the command, and stops
# the nodes when it ends. A cluster named by the variable is used as it is.
#
# CLUSTER_REPLICAS=1 gives each master a replica (six nodes), so a master
# can be killed and its replica take over, the way a fleet fails over. The
# URL still names the three masters as seeds. REDIS_CLUSTER_DIR names the
# nodes' directory: node<i>/port and node<i>/pid for each node (masters
# first, as created), node<i>/redis.log beside them.
set -euo pipefail

if [ $# -eq 0 ]; then
	echo "usage: $0 <command> [args…]" >&2
	exit 2
fi

log() { echo "cluster: $*" >&2; }

if [ -n "${REDIS_CLUSTER_URL:-}" ]; then
	log "using $REDIS_CLUSTER_URL"
	exec "$@"
fi

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ]; then
		log "redis-server is not installed; install it (apt-get install redis-server) or set REDIS_CLUSTER_URL"
		exit 1
	fi
	log "installing redis-server"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >&2
	service redis-server stop >/dev/null 2>&1 || true
fi

# Each node also listens on its port + 10000 (the cluster bus). Both stay
# below the kernel's ephemeral range, so a load test's outgoing connections
# cannot be holding a port a node is about to bind.
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$ephemeral_low" -gt 21000 ] 2>/dev/null || ephemeral_low=32768
taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
	local port
	for _ in $(seq 1 100); do
		port=$((10000 + RANDOM % (ephemeral_low - 20000)))
		if ! taken "$port" && ! taken $((port + 10000)); then
			echo "$port"
			return 0
		fi
	done
	log "no free port found"
	exit 1
}

started=()
workdir=$(mktemp -d -t waitroom-cluster.XXXXXX)
cleanup() {
	local rc=$?
	for pid in "${started[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
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

# until <seconds> <command…>: retries the command every 0.1 s until it
# succeeds or the time is up.
until_ok() {
	local tries=$(($1 * 10))
	shift
	for _ in $(seq 1 "$tries"); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	"$@" >/dev/null 2>&1
}

replicas=${CLUSTER_REPLICAS:-0}
case "$replicas" in
0 | 1) ;;
*) log "CLUSTER_REPLICAS is $replicas; it is 0 (the default) or 1"; exit 2 ;;
esac
nodes=$((3 * (replicas + 1)))

ports=()
for i in $(seq 1 "$nodes"); do
	dir="$workdir/node$i"
	mkdir -p "$dir"
	for attempt in 1 2 3; do
		port=$(free_port)
		# noeviction: an evicted seat counter is an oversell.
		redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" \
			--cluster-enabled yes --cluster-config-file "$dir/nodes.conf" --cluster-node-timeout 5000 \
			--save '' --appendonly no --maxmemory-policy noeviction \
			--logfile "$dir/redis.log" --daemonize no &
		pid=$!
		started+=($pid)
		until_ok 10 redis-cli -p "$port" ping && break
		kill -TERM "$pid" 2>/dev/null || true
		[ "$attempt" = 3 ] && { log "node $i did not start"; cat "$dir/redis.log" >&2; exit 1; }
	done
	ports+=("$port")
	echo "$port" >"$dir/port"
	echo "$pid" >"$dir/pid"
done

addrs=()
for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
redis-cli --cluster create "${addrs[@]}" \
	--cluster-replicas "$replicas" --cluster-yes >"$workdir/create.log" 2>&1 ||
	{ log "redis-cli --cluster create failed"; cat "$workdir/create.log" >&2; exit 1; }

cluster_ok() {
	local p
	for p in "${ports[@]}"; do
		redis-cli -p "$p" cluster info | grep -q '^cluster_state:ok' || return 1
	done
}
until_ok 30 cluster_ok || { log "the cluster did not reach cluster_state:ok"; redis-cli -p "${ports[0]}" cluster info >&2; exit 1; }

# A replica that has not synced yet cannot take over.
replicas_synced() {
	local p
	for p in "${ports[@]}"; do
		if redis-cli -p "$p" info replication | grep -q '^role:slave'; then
			redis-cli -p "$p" info replication | grep -q '^master_link_status:up' || return 1
		fi
	done
}
if [ "$replicas" != 0 ]; then
	until_ok 30 replicas_synced || { log "the replicas did not sync with their masters"; exit 1; }
fi

export REDIS_CLUSTER_URL="redis://127.0.0.1:${ports[0]}?addr=127.0.0.1:${ports[1]}&addr=127.0.0.1:${ports[2]}"
export REDIS_CLUSTER_DIR="$workdir"
if [ "$replicas" = 0 ]; then
	log "3 masters at $REDIS_CLUSTER_URL"
else
	log "3 masters and 3 replicas at $REDIS_CLUSTER_URL (nodes in $REDIS_CLUSTER_DIR)"
fi
"$@"
