#!/usr/bin/env bash
# The failover demo without Docker (make demo-local): three masters and
# three region servers as local processes on 127.0.0.1, tables created
# while the leader's process is SIGKILLed, then a check from the region
# servers' own answers that every region is open exactly once. Exits
# non-zero when a check fails; kills every process it started on exit.
#
# Needs Go only. Data and logs go to a temporary directory, deleted after a
# passing run and kept (its path printed) after a failing one. With --keep
# (or DEMO_KEEP=1; `make demo-local KEEP=1`) the cluster is left running
# and the directory kept. scripts/demo-lib.sh says what the demo proves.
#
# Usage: scripts/demo-local.sh [--keep]
#
# Environment: DEMO_PORT_BASE (default 19000: master N listens on
# BASE+10N (admin API), +1 (Raft), +2 (HTTP); region server N on
# BASE+100+10N), BATON_RS_OP_LATENCY (region servers' time per open/close,
# default 500ms), BATON_NODE_BIN (use this baton binary instead of building
# one), DEMO_KEEP=1, and DEMO_TABLES, DEMO_REGIONS, DEMO_STAGGER_MS,
# DEMO_WITNESS_STEPS, DEMO_WITNESS_DELAY, DEMO_MAX_FAILOVER_MS,
# DEMO_TIMEOUT, DEMO_SETTLE (scripts/demo-lib.sh). Needs bash 4 or later.
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
# shellcheck source=scripts/demo-lib.sh
. "$REPO/scripts/demo-lib.sh"
demo_args "$REPO/scripts/$(basename "$0")" "$@"

BASE=${DEMO_PORT_BASE:-19000}
OP_LATENCY=${BATON_RS_OP_LATENCY:-500ms}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/baton-demo-local.XXXXXX")
LOGS=$WORK/logs
mkdir -p "$LOGS"
CHECK=$WORK/democheck
NODE=${BATON_NODE_BIN:-$WORK/baton}
RS_IDS="rs1 rs2 rs3"

grpc_port() { echo $((BASE + 10 * $1)); }
raft_port() { echo $((BASE + 10 * $1 + 1)); }
http_port() { echo $((BASE + 10 * $1 + 2)); }
rs_port() { echo $((BASE + 100 + 10 * $1)); }
ADDR=127.0.0.1:$(grpc_port 1),127.0.0.1:$(grpc_port 2),127.0.0.1:$(grpc_port 3)
PEERS=n1=127.0.0.1:$(raft_port 1),n2=127.0.0.1:$(raft_port 2),n3=127.0.0.1:$(raft_port 3)

declare -A PID=() # node id (n1.., rs1..) -> process id

# Without TLS the masters know one another by a shared secret: a standby's
# forwarded calls then keep their caller's address, in the audit trail and
# the rate limit, which no client can claim.
SECRET_FILE=$WORK/cluster-secret
(umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$SECRET_FILE")

start_master() {
	local i=$1
	"$NODE" agent --id "n$i" --data-dir "$WORK/data/n$i" \
		--raft-addr "127.0.0.1:$(raft_port "$i")" --grpc-addr "127.0.0.1:$(grpc_port "$i")" \
		--http-addr "127.0.0.1:$(http_port "$i")" --peers "$PEERS" --cluster-secret-file "$SECRET_FILE" >>"$LOGS/n$i.log" 2>&1 &
	PID[n$i]=$!
	say "n$i   pid ${PID[n$i]}  admin 127.0.0.1:$(grpc_port "$i")  raft :$(raft_port "$i")  http :$(http_port "$i")  log $LOGS/n$i.log"
}
start_regionserver() {
	local i=$1
	"$NODE" regionserver --id "rs$i" --grpc-addr "127.0.0.1:$(rs_port "$i")" --masters "$ADDR" \
		--op-latency "$OP_LATENCY" >>"$LOGS/rs$i.log" 2>&1 &
	PID[rs$i]=$!
	say "rs$i  pid ${PID[rs$i]}  127.0.0.1:$(rs_port "$i")  log $LOGS/rs$i.log"
}

master_ready_url() { echo "http://127.0.0.1:$(http_port "${1#n}")/readyz"; }
master_ready_urls() { for i in 1 2 3; do master_ready_url "n$i"; done; }
kill_master() {
	local pid=${PID[$1]}
	say "\$ kill -9 $pid   ($1)"
	KILL_MS=$(now_ms)
	kill -9 "$pid"
	wait "$pid" 2>/dev/null || true
	unset "PID[$1]"
}
restart_master() {
	say "starting $1 again on its data directory:"
	start_master "${1#n}"
}
leader_log() { cat "$LOGS/$1.log"; }
regionservers_running() {
	local s ok=0
	for s in $RS_IDS; do
		if ! kill -0 "${PID[$s]}" 2>/dev/null; then
			printf '    %s (pid %s) is not running; its log ends:\n' "$s" "${PID[$s]}" >&2
			tail -5 "$LOGS/$s.log" | sed 's/^/      /' >&2
			ok=1
		fi
	done
	return $ok
}
# A binary built with -race (the integration tests' BATON_NODE_RACE=1)
# reports races in the logs, which a passing run deletes.
extra_checks() {
	local f
	for f in "$LOGS"/*.log; do
		if grep -q "WARNING: DATA RACE" "$f"; then
			fail "$(basename "$f" .log) reported a data race (see $f)"
		fi
	done
}
dump_logs() {
	local f
	for f in "$LOGS"/*.log; do
		[ -e "$f" ] || continue
		echo
		echo "==> $(basename "$f") (last 30 lines)"
		tail -30 "$f" | sed 's/^/    /'
	done
}

cleanup() {
	local rc=$? id pid deadline
	trap - EXIT INT TERM
	stop_creates
	if [ "${DEMO_KEEP:-}" = 1 ]; then
		echo
		echo "==> Kept (--keep / DEMO_KEEP=1): the cluster is still running; client: $NODE <command> --addr $ADDR"
		echo "    pids: ${PID[*]}; data and logs: $WORK"
		exit "$rc"
	fi
	[ "$rc" != 0 ] && dump_logs
	echo
	echo "==> Stop every process the demo started"
	for id in "${!PID[@]}"; do
		kill -TERM "${PID[$id]}" 2>/dev/null || true
	done
	deadline=$((SECONDS + 20))
	for id in "${!PID[@]}"; do
		pid=${PID[$id]}
		while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [ "$rc" = 0 ]; then
		rm -rf "$WORK"
	else
		echo "    data and logs kept in $WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "Build the baton binary"
if [ -n "${BATON_NODE_BIN:-}" ]; then
	say "using BATON_NODE_BIN=$NODE"
else
	say "\$ go build -o $NODE ./cmd/node"
	go build -o "$NODE" ./cmd/node
fi
go build -o "$CHECK" ./scripts/democheck
if "$NODE" regionserver -h 2>&1 | grep -q 'unknown command'; then
	die "this baton binary has no 'regionserver' command yet"
fi

step "Start 3 masters and 3 region servers on 127.0.0.1"
for i in 1 2 3; do
	for port in "$(grpc_port $i)" "$(raft_port $i)" "$(http_port $i)" "$(rs_port $i)"; do
		port_free "$port" || die "127.0.0.1:$port is in use (set DEMO_PORT_BASE to move the demo's ports)"
	done
done
for i in 1 2 3; do start_master "$i"; done
for i in 1 2 3; do start_regionserver "$i"; done
say "region server op latency $OP_LATENCY"

run_demo
