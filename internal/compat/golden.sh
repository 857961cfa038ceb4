#!/usr/bin/env bash
# golden.sh BIN VERSION: writes testdata/VERSION beside this script with the
# release binary BIN (built from that release's commit; see testdata/README.md).
#
# The files must come from the release itself, not from the current code:
# the point of them is to catch the current code misreading what a release
# wrote. So everything here goes through BIN's own command line, whose
# flags and --json keys are themselves part of the compatibility promise.
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 BIN VERSION (e.g. /tmp/node-0.1.0 v0.1.0)" >&2
	exit 2
fi
BIN=$(realpath "$1")
VERSION=$2
here=$(cd "$(dirname "$0")" && pwd)
out=$here/testdata/$VERSION
work=$(mktemp -d)
pids=()

cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

say() { echo "golden: $*" >&2; }
die() {
	say "$*"
	for f in "$work"/*.err; do [ -f "$f" ] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
	exit 1
}

# freeport prints a loopback port nothing answers on.
freeport() {
	while :; do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

# waitfor DESC CMD...: runs CMD until it succeeds, for at most 60 s.
waitfor() {
	local desc=$1
	shift
	for _ in $(seq 600); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	die "timed out waiting for $desc"
}

# stop PID: SIGTERM, then SIGKILL after 15 s (a region server in the middle
# of an hour-long open may not answer).
stop() {
	kill -TERM "$1" 2>/dev/null || return 0
	for _ in $(seq 150); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$1" 2>/dev/null || true
}

pki=$work/pki
mkdir -p "$pki"
"$BIN" tls ca create --dir "$pki" >/dev/null
"$BIN" tls cert create --dir "$pki" --role master --id m1 >/dev/null
for rs in rs1 rs2; do "$BIN" tls cert create --dir "$pki" --role regionserver --id $rs >/dev/null; done
"$BIN" tls cert create --dir "$pki" --role client --id ops >/dev/null
export BATON_TLS_CA=$pki/baton-ca.pem BATON_TLS_CERT=$pki/client-ops.pem BATON_TLS_KEY=$pki/client-ops-key.pem

c() { "$BIN" "$@"; }
cj() { "$BIN" "$@" --json; }

# procstate ID: the procedure's state as BIN reports it.
procstate() { cj proc get "$1" | jq -r .state; }
isstate() { [ "$(procstate "$1")" = "$2" ]; }

# scenario RUN FILLER: one single-master cluster (TLS, so access control
# is on and writes ACL and audit records) taken through every kind of
# procedure, left with some in flight and stopped. FILLER=1 first pushes
# the Raft log past the snapshot threshold, for a snapshot.
scenario() {
	local run=$1 filler=$2 data=$work/$1
	local grpc raft http
	grpc=$(freeport) raft=$(freeport) http=$(freeport)
	export BATON_ADDR=127.0.0.1:$grpc
	"$BIN" agent --id m1 --peers "m1=127.0.0.1:$raft" --data-dir "$data" \
		--grpc-addr "127.0.0.1:$grpc" --raft-addr "127.0.0.1:$raft" --http-addr "127.0.0.1:$http" \
		--acl-initial-grants ops=admin --tls-cert "$pki/master-m1.pem" --tls-key "$pki/master-m1-key.pem" \
		>"$work/$run-agent.out" 2>"$work/$run-agent.err" &
	local agent=$!
	pids+=("$agent")
	waitfor "the master to lead" c acl whoami

	startrs() {
		"$BIN" regionserver --id "$1" --grpc-addr "127.0.0.1:$(freeport)" --masters "127.0.0.1:$grpc" \
			--op-latency "$2" --tls-cert "$pki/regionserver-$1.pem" --tls-key "$pki/regionserver-$1-key.pem" \
			>"$work/$run-$1.out" 2>"$work/$run-$1.err" &
		pids+=("$!")
		rspids+=("$!")
		waitfor "$1 to register" sh -c "'$BIN' rs list --json | jq -e '.servers[] | select(.id == \"$1\" and .lease_state == \"live\")'"
	}
	local rspids=()
	startrs rs1 0s

	# Access control: a binding kept, one revoked, a token kept, one deleted
	# (besides the initial grant and the bootstrap token the leader made).
	c acl grant alice --permission read >/dev/null
	c acl grant bob --permission operate >/dev/null
	c acl revoke bob >/dev/null
	c acl token create ci --permission operate >/dev/null
	local scratch
	scratch=$(cj acl token create scratch --permission read | jq -r .accessor)
	c acl token delete "$scratch" >/dev/null

	# Finished procedures, kept with their results.
	c ns create ns1 --wait >/dev/null
	c ns create ns2 --wait >/dev/null
	c ns delete ns2 --wait >/dev/null
	c table create ns1:done --regions 3 --wait >/dev/null
	c table disable ns1:done --wait >/dev/null
	c table enable ns1:done --wait >/dev/null
	c proc submit sleep --arg steps=2 --arg delay=0 --wait >/dev/null
	c proc submit fail --arg steps=3 --arg fail_at=1 --wait >/dev/null && die "fail procedure did not fail"
	c proc submit fanout --arg children=2 --arg steps=1 --arg delay=0 --wait >/dev/null

	# In flight: a table create whose regions a region server takes an
	# hour to open, a held exclusive lock and its waiter.
	startrs rs2 1h
	local pending held waiter
	pending=$(cj table create ns1:pending --regions 4 | jq -r .id)
	waitfor "the pending table's regions to be dispatched" sh -c "'$BIN' proc get $pending --json | jq -e '.children | length == 4'"
	held=$(cj lock acquire --kind table --name ns1:done --exclusive --lease 1h --description golden-held | jq -r .id)
	waiter=$(cj lock acquire --kind table --name ns1:done --exclusive --lease 1h --description golden-waiter | jq -r .id)

	local filler_id=0
	if [ "$filler" = 1 ]; then
		# 0.1.0 has no command that snapshots: its log budget does, once
		# the log holds enough entries (about 16 MiB of log, or 8192
		# entries of 2 KiB or less).
		filler_id=$(cj proc submit sleep --arg steps=9000 --arg delay=0 --wait --timeout 10m | jq -r .id)
		waitfor "a snapshot" sh -c "ls '$data'/snapshots/*/state.bin"
	fi

	# A sleep mid-way: its first step done, suspended for 20 s before the
	# second (long enough for what follows to run before it wakes).
	local sleeping
	sleeping=$(cj proc submit sleep --arg steps=2 --arg delay=20s | jq -r .id)
	waitfor "the sleep's first step" sh -c "'$BIN' proc get $sleeping --json | jq -e '.state == \"WAITING_TIMEOUT\"'"

	local o=$work/$run-out t0=$SECONDS
	mkdir -p "$o"
	cj proc list --all >"$o/procs.json"
	cj ns list >"$o/namespaces.json"
	cj table list >"$o/tables.json"
	cj region list --all >"$o/regions.json"
	cj rs list >"$o/servers.json"
	cj acl list >"$o/acl.json"
	cj audit list --limit 0 >"$o/audit.json"
	jq -n --argjson pending "$pending" --argjson held "$held" --argjson waiter "$waiter" --argjson sleeping "$sleeping" \
		--argjson filler "$filler_id" \
		'{pending_table_create: $pending, held_lock: $held, waiting_lock: $waiter, sleep_midway: $sleeping, snapshot_filler: $filler}' >"$o/roles.json"
	# Still as dumped: the sleep has not woken, and nothing else moves
	# without a region server that answers.
	isstate "$sleeping" WAITING_TIMEOUT || die "the sleep woke before the master stopped ($((SECONDS - t0)) s): dump again: $(cj proc get "$sleeping")"

	stop "$agent"
	for p in "${rspids[@]}"; do stop "$p"; done
}

say "cluster with work in flight"
scenario cluster 0
say "cluster pushed to a snapshot"
scenario snap 1

rm -rf "$out"
mkdir -p "$out/datadir" "$out/snapshot"
cp -r "$work/cluster-out/." "$out/"
# The data directory as the release left it, less what is not a format
# (the node's lock file, if any, and empty directories are recreated).
cp -r "$work/cluster/." "$out/datadir/"
rm -f "$out"/datadir/fsm/wal-*/LOCK
newest=$(ls -d "$work"/snap/snapshots/*/ | sort -t- -k2,2n | tail -1)
cp "$newest/meta.json" "$newest/state.bin" "$out/snapshot/"
jq '.' "$work/snap-out/procs.json" >"$out/snapshot/procs.json"
cp "$work/snap-out/roles.json" "$out/snapshot/roles.json"
say "wrote $out ($(du -sh "$out" | cut -f1))"
