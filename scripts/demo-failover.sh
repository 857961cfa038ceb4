#!/usr/bin/env bash
# The failover demo on Docker Compose (make demo-failover): three masters
# and three region servers in containers (docker-compose.yml), tables
# created while the leader's container is killed, then a check from the
# region servers' own answers that every region is open exactly once.
# Exits non-zero when a check fails (scripts/demo-lib.sh says what it
# proves). On exit, pass or fail, it removes everything it made: the
# containers, the network, the volumes, the image (DEMO_PROJECT:dev,
# baton-demo:dev by default) and its scratch directory, unless asked to
# keep them (--keep, or DEMO_KEEP=1; `make demo-failover KEEP=1`).
#
# Usage: scripts/demo-failover.sh [--keep]
#
# Needs Go (to build the static binary) and a Docker engine with Compose
# (`docker compose` or docker-compose). No image is pulled: the image is
# FROM scratch around bin/baton.
#
# Environment: DEMO_PROJECT (compose project, default baton-demo),
# BATON_HOST_PORT_PREFIX (host ports, default 18: 18070, 18170, 18270; see
# docker-compose.yml), BATON_RS_OP_LATENCY (region servers' time per
# open/close, default 500ms), DEMO_IMAGE (the image to build and remove,
# default DEMO_PROJECT:dev), DEMO_KEEP=1 (leave the cluster and the image),
# and DEMO_TABLES, DEMO_REGIONS, DEMO_STAGGER_MS, DEMO_WITNESS_STEPS,
# DEMO_WITNESS_DELAY, DEMO_MAX_FAILOVER_MS, DEMO_TIMEOUT, DEMO_SETTLE
# (scripts/demo-lib.sh).
# DEMO_COMPOSE_PROFILE=statefulset runs it on the compose profile of that
# name instead of the default services: masters baton-master-0..2 and
# region servers baton-rs-0..2 named as a Kubernetes StatefulSet's pods,
# started with --initial-cluster-size 3 and --listen-host 0.0.0.0 (no peer
# list), on the same host ports; after the failover it also scales up:
# baton-master-3 starts with the same arguments, joins by itself and must
# become a voter within DEMO_TIMEOUT.
# For testing the script itself: BATON_NODE_BIN (the client binary on the
# host; the image always holds bin/baton) and DEMO_COMPOSE_FILE.
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
# shellcheck source=scripts/demo-lib.sh
. "$REPO/scripts/demo-lib.sh"
demo_args "$REPO/scripts/$(basename "$0")" "$@"

export BATON_HOST_PORT_PREFIX=${BATON_HOST_PORT_PREFIX:-18}
export BATON_RS_OP_LATENCY=${BATON_RS_OP_LATENCY:-500ms}
PROJECT=${DEMO_PROJECT:-baton-demo}
# The demo's own image, not baton:dev: removing it must not pull the image
# from under a `make compose-up` cluster.
export BATON_IMAGE=${DEMO_IMAGE:-$PROJECT:dev}
P=$BATON_HOST_PORT_PREFIX
ADDR=127.0.0.1:${P}070,127.0.0.1:${P}170,127.0.0.1:${P}270
PROFILE=${DEMO_COMPOSE_PROFILE:-}
case $PROFILE in
"")
	MASTER_IDS="n1 n2 n3"
	RS_IDS="rs1 rs2 rs3"
	;;
statefulset)
	MASTER_IDS="baton-master-0 baton-master-1 baton-master-2"
	RS_IDS="baton-rs-0 baton-rs-1 baton-rs-2"
	;;
*)
	echo "demo-failover: DEMO_COMPOSE_PROFILE=$PROFILE: want statefulset, or nothing for the default services" >&2
	exit 2
	;;
esac
NODE=$REPO/bin/baton # also the image's binary
CLIENT=${BATON_NODE_BIN:-$NODE}

if ! docker info >/dev/null 2>&1; then
	echo "demo-failover: no Docker engine answers ('docker info' fails); 'make demo-local' runs the same demo without Docker" >&2
	exit 2
fi
if docker compose version >/dev/null 2>&1; then
	COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
	COMPOSE=(docker-compose)
else
	echo "demo-failover: neither 'docker compose' nor docker-compose is installed" >&2
	exit 2
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/baton-demo-compose.XXXXXX")
CHECK=$WORK/democheck
COMPOSE_CMD="${COMPOSE[*]}"
COMPOSE+=(-p "$PROJECT" --project-directory "$REPO" -f "${DEMO_COMPOSE_FILE:-$REPO/docker-compose.yml}")
if [ -n "$PROFILE" ]; then
	COMPOSE+=(--profile "$PROFILE" --profile "$PROFILE-scaleup")
fi
compose() { "${COMPOSE[@]}" "$@"; }

# masterN serves node nN; in the profile statefulset each service is
# named as its master. The host ports go by the master's place: the
# first's on ${P}070/${P}072, the second's on ${P}170/${P}172, ...
service_of() { if [ -n "$PROFILE" ]; then echo "$1"; else echo "master${1#n}"; fi; }
ordinal_of() { if [ -n "$PROFILE" ]; then echo "${1##*-}"; else echo "$((${1#n} - 1))"; fi; }
master_ready_url() { echo "https://127.0.0.1:${P}$(ordinal_of "$1")72/readyz"; }
master_ready_urls() { for id in $MASTER_IDS; do master_ready_url "$id"; done; }
# Container ids, looked up once the cluster is up: at the kill, a lookup
# (`compose ps`, seconds with docker-compose 1.x) would let the procedures
# caught half done finish before the kill lands.
declare -A CID=()
kill_master() {
	local svc cid
	svc=$(service_of "$1")
	cid=${CID[$1]:-$(compose ps -q "$svc")}
	[ -n "$cid" ] || die "no container for $svc"
	say "\$ docker kill $svc  (container ${cid:0:12})"
	KILL_MS=$(now_ms)
	docker kill "$cid" >/dev/null
}
restart_master() {
	local svc
	svc=$(service_of "$1")
	say "\$ $COMPOSE_CMD start $svc"
	compose start "$svc" 2>&1 | sed 's/^/      /'
}
leader_log() { compose logs --no-color "$(service_of "$1")" 2>&1; }
regionservers_running() {
	local s cid ok=0 state
	for s in $RS_IDS; do
		cid=$(compose ps -q "$s")
		state=$( [ -n "$cid" ] && docker inspect -f '{{.State.Status}} (exit {{.State.ExitCode}}, restarts {{.RestartCount}})' "$cid" || echo missing)
		case $state in
		running*) ;;
		*)
			printf '    %s is %s\n' "$s" "$state" >&2
			ok=1
			;;
		esac
	done
	return $ok
}
dump_logs() {
	echo
	echo "==> Container logs (last 40 lines each)"
	compose logs --no-color --tail=40 2>&1 | sed 's/^/    /' || true
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_creates
	if [ "$rc" != 0 ]; then
		dump_logs
	fi
	if [ "${DEMO_KEEP:-}" = 1 ]; then
		echo
		echo "==> Kept (--keep / DEMO_KEEP=1): the cluster is still running; client: $NODE <command> --addr $ADDR"
		echo "    with BATON_TLS_CA=$WORK/tls/baton-ca.pem BATON_TLS_CERT=$WORK/tls/client-operator.pem BATON_TLS_KEY=$WORK/tls/client-operator-key.pem"
		echo "    remove it with: BATON_IMAGE=$BATON_IMAGE ${COMPOSE[*]} down -v --remove-orphans && docker rmi $BATON_IMAGE && rm -rf $WORK"
	else
		echo
		echo "==> Tear down: $COMPOSE_CMD down -v --remove-orphans; docker rmi $BATON_IMAGE"
		compose down -v --remove-orphans 2>&1 | sed 's/^/    /' || true
		if [ -n "$(docker images -q "$BATON_IMAGE" 2>/dev/null)" ]; then
			docker rmi "$BATON_IMAGE" 2>&1 | tail -1 | sed 's/^/    /' || true
		fi
		rm -rf "$WORK"
	fi
	exit "$rc"
}
# scale_up (profile statefulset): a fourth master with the same arguments
# as the first three but its name joins through them by itself (its
# ordinal is >= --initial-cluster-size) and is promoted to voter.
scale_up() {
	local id=baton-master-3 deadline=$((SECONDS + DEMO_TIMEOUT)) t0 seen="" suffrage=""
	step "Scale up: $id starts with the same arguments and joins by itself"
	say "\$ $COMPOSE_CMD --profile $PROFILE-scaleup up -d --no-deps $id"
	t0=$(now_ms)
	compose up -d --no-deps "$id" 2>&1 | sed 's/^/      /'
	while ((SECONDS < deadline)); do
		if node_json "$WORK/scale.json" cluster status --timeout 3s; then
			if suffrage=$("$CHECK" voter --id "$id" <"$WORK/scale.json"); then
				seen="${seen:+$seen -> }$suffrage"
				break
			fi
			case " $seen " in *" $suffrage "*) ;; *) seen="${seen:+$seen -> }$suffrage" ;; esac
		fi
		sleep 0.5
	done
	if [ "$suffrage" = Voter ]; then
		say "SCALE-UP: $id joined and is a voter $(($(now_ms) - t0)) ms after its start (seen: $seen)"
		# It joined as a non-voter (cluster version 2) and the leader
		# promoted it; the poll above may be too slow to see the first.
		# shellcheck disable=SC2086
		compose logs --no-color $MASTER_IDS baton-master-3 >"$WORK/scale.log" 2>&1 || true
		if grep -q 'autopilot: promoted a non-voter' "$WORK/scale.log"; then
			grep -E 'joined the cluster|autopilot: promoted a non-voter' "$WORK/scale.log" | cut -c1-220 | sed 's/^/      /'
		else
			fail "no master logged the promotion of $id from non-voter"
		fi
	else
		fail "$id is not a voter after ${DEMO_TIMEOUT}s (seen: ${seen:-nothing})"
	fi
	show cluster status
}
if [ -n "$PROFILE" ]; then
	extra_checks() { scale_up; }
fi

trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "Build the static baton binary and the image (FROM scratch)"
say "\$ CGO_ENABLED=0 go build -o bin/baton ./cmd/node"
CGO_ENABLED=0 go build -o "$NODE" ./cmd/node
go build -o "$CHECK" ./scripts/democheck
NODE=$CLIENT
if "$NODE" regionserver -h 2>&1 | grep -q 'unknown command'; then
	die "this baton binary has no 'regionserver' command yet"
fi
say "\$ scripts/compose-tls.sh   # a development CA and a certificate per process: mutual TLS on every channel"
export BATON_TLS_DIR=$WORK/tls
BATON_NODE_BIN="$REPO/bin/baton" "$REPO/scripts/compose-tls.sh" "$BATON_TLS_DIR" >/dev/null
# Every client command below presents the operator's certificate.
export BATON_TLS_CA=$BATON_TLS_DIR/baton-ca.pem BATON_TLS_CERT=$BATON_TLS_DIR/client-operator.pem BATON_TLS_KEY=$BATON_TLS_DIR/client-operator-key.pem
say "\$ $COMPOSE_CMD build"
compose build >"$WORK/build.log" 2>&1 || { sed 's/^/      /' "$WORK/build.log"; die "the image did not build"; }
tail -2 "$WORK/build.log" | sed 's/^/      /'

step "Start 3 masters and 3 region servers${PROFILE:+ (profile $PROFILE: StatefulSet names, no peer list)}"
ports="${P}070 ${P}072 ${P}170 ${P}172 ${P}270 ${P}272"
[ -n "$PROFILE" ] && ports="$ports ${P}370 ${P}372"
for port in $ports; do
	port_free "$port" || die "127.0.0.1:$port is in use (another cluster up? 'make compose-down', or set BATON_HOST_PORT_PREFIX)"
done
compose down -v --remove-orphans >/dev/null 2>&1 || true
services=""
if [ -n "$PROFILE" ]; then
	# Its own services only: the default ones have no profile and
	# would start too.
	services="$MASTER_IDS $RS_IDS"
fi
say "\$ $COMPOSE_CMD${PROFILE:+ --profile $PROFILE} up -d${services:+ $services}"
# shellcheck disable=SC2086
compose up -d $services 2>&1 | sed 's/^/      /'
for id in $MASTER_IDS; do
	CID[$id]=$(compose ps -q "$(service_of "$id")")
done
say "masters (admin API) on $ADDR; region server op latency $BATON_RS_OP_LATENCY"

run_demo
