# shellcheck shell=bash
# The failover demo's steps, shared by scripts/demo-failover.sh (Docker
# Compose) and scripts/demo-local.sh (local processes). Sourced, not run.
#
# The sourcing script sets:
#   NODE   the baton binary on this host (the client)
#   CHECK  the democheck binary (scripts/democheck: reads the --json output)
#   WORK   a scratch directory
#   ADDR   the masters' admin addresses as this host reaches them, comma-separated
#   RS_IDS the region servers' ids, space-separated
# and defines:
#   master_ready_urls          the masters' /readyz URLs, one per line
#   master_ready_url ID        one master's /readyz URL (ID: n1, n2, n3)
#   kill_master ID             SIGKILL that master
#   restart_master ID          start it again on the same data
#   leader_log ID              print the lines of that master's log saying what
#                              it loaded and resumed when it took over
#   regionservers_running      succeed iff every region server process is alive,
#                              else print which are not
#   dump_logs                  print the tail of every node's log
# kill_master sets KILL_MS (now_ms) just before it kills: the failover is
# timed from there. The sourcing script may define extra_checks (run
# before the result; calls fail).
#
# What the demo proves, and fails without: the leader is killed while
# procedures it has been writing are half done (a witness procedure of
# DEMO_WITNESS_STEPS sleeps of DEMO_WITNESS_DELAY, and table creates), a
# new leader is elected within DEMO_MAX_FAILOVER_MS, and at least one
# procedure's runs hold writes by both the killed leader and the new one
# (printed with its timeline as the proof); then every region is open
# exactly once.
#
# Knobs (environment): DEMO_TABLES (5), DEMO_REGIONS (8 per table),
# DEMO_STAGGER_MS (400: table N's create starts (N-1) x this after the
# first, so that the kill finds some tables created, some half created and
# some not yet submitted), DEMO_WITNESS_STEPS (40) and DEMO_WITNESS_DELAY
# (250ms: ten seconds of steps, which the kill cannot miss),
# DEMO_MAX_FAILOVER_MS (1500: the demo fails if the new leader takes
# longer), DEMO_TIMEOUT (seconds for each wait, 90), DEMO_SETTLE (seconds
# the final check may wait for regions still opening, 30).

DEMO_TABLES=${DEMO_TABLES:-5}
DEMO_REGIONS=${DEMO_REGIONS:-8}
DEMO_STAGGER_MS=${DEMO_STAGGER_MS:-400}
DEMO_WITNESS_STEPS=${DEMO_WITNESS_STEPS:-40}
DEMO_WITNESS_DELAY=${DEMO_WITNESS_DELAY:-250ms}
DEMO_MAX_FAILOVER_MS=${DEMO_MAX_FAILOVER_MS:-1500}
DEMO_TIMEOUT=${DEMO_TIMEOUT:-90}
DEMO_SETTLE=${DEMO_SETTLE:-30}
KILL_MS=

STEP=0
WITNESS=
HALFDONE=
FAILURES=()
CREATE_PIDS=()
TABLES=()

# now_ms: wall-clock milliseconds (bash 5's EPOCHREALTIME; seconds on bash 4).
# demo_args reads a demo script's own arguments (script "$@"): --keep,
# or -h for the script's header comment.
demo_args() {
	local script=$1 arg
	shift
	for arg in "$@"; do
		case $arg in
		--keep) DEMO_KEEP=1 ;;
		-h | --help)
			sed -n '2,/^set -euo/p' "$script" | sed '$d; s/^# \{0,1\}//'
			exit 0
			;;
		*)
			echo "usage: $script [--keep]" >&2
			exit 2
			;;
		esac
	done
}

now_ms() {
	if [ -n "${EPOCHREALTIME:-}" ]; then
		local t=${EPOCHREALTIME/[.,]/}
		echo $((t / 1000))
	else
		echo $((SECONDS * 1000))
	fi
}

step() {
	STEP=$((STEP + 1))
	printf '\n==> Step %d: %s  [%s]\n' "$STEP" "$*" "$(date +%H:%M:%S)"
}
say() { printf '    %s\n' "$*"; }
show() {
	# show CMD...: print a client command, then run it, indented.
	printf '    $ baton %s\n' "$*"
	"$NODE" "$@" --addr "$ADDR" 2>&1 | sed 's/^/      /' || true
}
# fail and die write to stderr: they may run inside $(...).
fail() {
	FAILURES+=("$*")
	printf '    FAIL: %s\n' "$*" >&2
}
die() {
	fail "$*"
	printf '\n==> The demo stopped: %s\n' "$*" >&2
	exit 1
}

# node_json FILE ARGS...: run a client command with --json into FILE.
node_json() {
	local out=$1
	shift
	"$NODE" "$@" --json --addr "$ADDR" >"$out" 2>"$out.err"
}

# wait_leader [NOT]: print the leader's id once one is known (and is not
# NOT, the master just killed); die after DEMO_TIMEOUT seconds.
wait_leader() {
	local not=${1:-} deadline=$((SECONDS + DEMO_TIMEOUT)) id
	while ((SECONDS < deadline)); do
		if node_json "$WORK/status.json" cluster status --timeout 3s &&
			id=$("$CHECK" leader --not "$not" <"$WORK/status.json"); then
			echo "$id"
			return 0
		fi
		sleep 0.2
	done
	die "no leader${not:+ other than $not} after ${DEMO_TIMEOUT}s ($(cat "$WORK/status.json.err" 2>/dev/null | tail -1))"
}

wait_masters() {
	# shellcheck disable=SC2046
	"$CHECK" ready --timeout "${DEMO_TIMEOUT}s" $(master_ready_urls) | sed 's/^/    /' ||
		die "the masters did not become ready"
}

wait_regionservers() {
	local deadline=$((SECONDS + DEMO_TIMEOUT)) got want
	want=$(printf '%s\n' $RS_IDS | sort | tr '\n' ' ')
	while ((SECONDS < deadline)); do
		if node_json "$WORK/rs.json" rs list --all; then
			got=$("$CHECK" servers <"$WORK/rs.json" | sort | tr '\n' ' ')
			[ "$got" = "$want" ] && return 0
		fi
		sleep 0.5
	done
	die "the region servers did not all register in ${DEMO_TIMEOUT}s (registered: ${got:-none}; want: $want; $(tail -1 "$WORK/rs.json.err" 2>/dev/null))"
}

# start_creates: create the demo's tables in the background, staggered,
# each client waiting for its procedure (through the failover: it retries
# with the same nonce and follows the new leader).
start_creates() {
	local i t d
	for i in $(seq 1 "$DEMO_TABLES"); do
		t=demo$i
		TABLES+=("$t")
		d=$(((i - 1) * DEMO_STAGGER_MS))
		(
			sleep "$((d / 1000)).$(printf %03d $((d % 1000)))"
			exec "$NODE" table create "$t" --regions "$DEMO_REGIONS" --wait --addr "$ADDR" --timeout 120s
		) >"$WORK/create-$t.log" 2>&1 &
		CREATE_PIDS+=($!)
	done
	say "started ${#TABLES[@]} clients, ${DEMO_STAGGER_MS} ms apart: baton table create demoN --regions $DEMO_REGIONS --wait ($((DEMO_TABLES * DEMO_REGIONS)) regions in all)"
}

# submit_witness: a procedure of DEMO_WITNESS_STEPS steps, which the kill
# is certain to find half done whatever the table creates are doing.
submit_witness() {
	local id
	say "\$ baton proc submit sleep --arg steps=$DEMO_WITNESS_STEPS --arg delay=$DEMO_WITNESS_DELAY --nonce demo-witness --owner demo"
	node_json "$WORK/witness.json" proc submit sleep --arg "steps=$DEMO_WITNESS_STEPS" --arg "delay=$DEMO_WITNESS_DELAY" \
		--nonce demo-witness --owner demo ||
		die "submitting the witness procedure: $(tail -1 "$WORK/witness.json.err")"
	id=$(sed -n 's/^ *"id": *\([0-9][0-9]*\).*/\1/p' "$WORK/witness.json" | head -1)
	[ -n "$id" ] || die "the witness procedure's submission printed no id: $(cat "$WORK/witness.json")"
	WITNESS=$id
	say "procedure $WITNESS: $DEMO_WITNESS_STEPS steps of $DEMO_WITNESS_DELAY"
}

# wait_halfdone LEADER: return once LEADER has persisted some steps (two
# writes past the submission) of a procedure not finished yet, and some
# regions of the tables are open but not all; HALFDONE holds those
# procedures, as democheck halfdone prints them.
wait_halfdone() {
	local ldr=$1 deadline=$((SECONDS + DEMO_TIMEOUT)) want=$((DEMO_TABLES * DEMO_REGIONS)) rc line="" half=""
	while ((SECONDS < deadline)); do
		if node_json "$WORK/half.json" proc list &&
			half=$("$CHECK" halfdone --leader "$ldr" --min-writes 3 <"$WORK/half.json") &&
			node_json "$WORK/midway.json" region list --all; then
			rc=0
			line=$("$CHECK" midway --want "$want" <"$WORK/midway.json") || rc=$?
			case $rc in
			0)
				say "progress: $line"
				HALFDONE=$half
				return 0
				;;
			2) die "every region was open before the leader could be killed ($line): raise the region servers' --op-latency (BATON_RS_OP_LATENCY) or DEMO_TABLES/DEMO_REGIONS" ;;
			esac
		fi
		sleep 0.1
	done
	die "no procedure half done on $ldr with some regions open in ${DEMO_TIMEOUT}s (regions: ${line:-no answer}; half done: ${half:-none}; $(tail -1 "$WORK/half.json.err" 2>/dev/null))"
}

# status_urls: the masters' /status URLs (next to /readyz).
status_urls() {
	local u
	for u in $(master_ready_urls); do echo "${u%/readyz}/status"; done
}

# collect DIR: every answer the final check reads.
collect() {
	local dir=$1 s
	rm -rf "$dir"
	mkdir -p "$dir"
	node_json "$dir/regions.json" region list --all || true
	node_json "$dir/servers.json" rs list --all || true
	node_json "$dir/tables.json" table list --all || true
	for s in $("$CHECK" servers <"$dir/servers.json" 2>/dev/null); do
		node_json "$dir/hosted-$s.json" rs regions "$s" || rm -f "$dir/hosted-$s.json"
	done
}

# verify_regions: the servers' own answers, until they pass or DEMO_SETTLE
# runs out; a region open twice fails at once.
verify_regions() {
	local deadline=$((SECONDS + DEMO_SETTLE)) rc attempt=0 tables
	tables=$(
		IFS=,
		echo "${TABLES[*]}"
	)
	while :; do
		attempt=$((attempt + 1))
		collect "$WORK/check"
		rc=0
		"$CHECK" verify --dir "$WORK/check" --tables "$tables" --regions-per-table "$DEMO_REGIONS" \
			--servers "$(echo $RS_IDS | tr ' ' ,)" >"$WORK/verify.txt" 2>&1 || rc=$?
		if [ "$rc" = 0 ] || [ "$rc" = 4 ] || ((SECONDS >= deadline)); then
			break
		fi
		sleep 1
	done
	sed 's/^/    /' "$WORK/verify.txt"
	case $rc in
	0) say "(checked from the servers' answers, attempt $attempt)" ;;
	4) fail "a region is open on more than one region server" ;;
	*) fail "the region check failed after $attempt attempts over ${DEMO_SETTLE}s (see above)" ;;
	esac
}

# run_demo: steps 3 onwards (the caller built and started the cluster).
run_demo() {
	local leader new line t0 elapsed first_ms ids id i rc proof ptype pstate pruns

	step "Wait for the masters and a leader"
	wait_masters
	leader=$(wait_leader)
	say "leader: $leader"
	show cluster status

	step "Wait for the region servers to register"
	wait_regionservers
	show rs list

	step "Start procedures for the kill to catch half done"
	submit_witness
	start_creates
	leader=$(wait_leader)
	wait_halfdone "$leader"
	say "half done on $leader, its writes only (ID TYPE STATE RUNS):"
	printf '%s\n' "$HALFDONE" | sed 's/^/      /'
	show proc list --roots

	step "Kill the leader mid-way"
	say "killing $leader (SIGKILL) while its procedures are half done"
	kill_master "$leader"
	t0=$KILL_MS

	step "A new leader takes over"
	# Each master's own /status, every 20 ms: 'cluster status' would wait
	# up to a second for the dead member at every try.
	# shellcheck disable=SC2046
	line=$("$CHECK" newleader --not "$leader" --since-ms "$t0" --timeout "${DEMO_TIMEOUT}s" $(status_urls)) ||
		die "no new leader after ${DEMO_TIMEOUT}s"
	new=${line%% *}
	elapsed=${line##* }
	say "new leader: $new, elected $elapsed ms after the kill"
	if ((elapsed > DEMO_MAX_FAILOVER_MS)); then
		fail "the new leader was elected $elapsed ms after the kill, more than DEMO_MAX_FAILOVER_MS=$DEMO_MAX_FAILOVER_MS"
	fi
	say "\$ baton proc submit sleep --arg steps=1 --arg delay=0s --wait   # the first procedure submitted after the kill"
	if "$NODE" proc submit sleep --arg steps=1 --arg delay=0s --nonce demo-after-kill --owner demo --wait \
		--addr "$ADDR" --timeout 60s >"$WORK/after-kill.log" 2>&1; then
		first_ms=$(($(now_ms) - t0))
		say "done $first_ms ms after the kill"
	else
		first_ms=
		fail "the first procedure after the kill: $(tail -2 "$WORK/after-kill.log" | tr '\n' ' ')"
	fi
	say "TIMING: new leader $new elected $elapsed ms after the kill; first new procedure done ${first_ms:-never} ms after the kill"
	show cluster status

	step "The new leader resumes the half-finished procedures"
	if node_json "$WORK/procs.json" proc list; then
		ids=$("$CHECK" unfinished <"$WORK/procs.json")
	else
		ids=""
		fail "proc list: $(tail -1 "$WORK/procs.json.err")"
	fi
	if [ -n "$ids" ]; then
		say "root procedures not finished yet, run by $new from here on: $(echo $ids)"
	else
		say "(every root procedure has finished already)"
	fi
	say "$new's log:"
	leader_log "$new" | grep -E 'procedures loaded|leadership established|leader services' | tail -3 | cut -c1-200 | sed 's/^/      /' || true
	if node_json "$WORK/regions-now.json" region list --all; then
		say "regions: $("$CHECK" midway --want $((DEMO_TABLES * DEMO_REGIONS)) <"$WORK/regions-now.json" || true)"
	fi
	show proc list --roots

	step "Wait for every create to finish"
	for i in "${!CREATE_PIDS[@]}"; do
		rc=0
		wait "${CREATE_PIDS[$i]}" || rc=$?
		if [ "$rc" = 0 ]; then
			say "${TABLES[$i]}: created ($(tail -1 "$WORK/create-${TABLES[$i]}.log" | tr -s ' '))"
		else
			fail "baton table create ${TABLES[$i]} exited $rc: $(tail -3 "$WORK/create-${TABLES[$i]}.log" | tr '\n' ' ')"
		fi
	done
	CREATE_PIDS=()
	for id in $ids $WITNESS; do
		"$NODE" proc wait "$id" --addr "$ADDR" --timeout 120s >"$WORK/wait-$id.log" 2>&1 ||
			fail "baton proc wait $id: $(tail -2 "$WORK/wait-$id.log" | tr '\n' ' ')"
	done
	say "every client returned $(($(now_ms) - t0)) ms after the kill"
	show proc list --roots

	step "Proof: procedures written by both $leader (killed) and $new (new leader)"
	proof=""
	if node_json "$WORK/final.json" proc list; then
		rc=0
		proof=$("$CHECK" resumed --killed "$leader" --new "$new" <"$WORK/final.json") || rc=$?
		if [ "$rc" = 0 ]; then
			say "ID TYPE STATE RUNS:"
			printf '%s\n' "$proof" | sed 's/^/      /'
			read -r id ptype pstate pruns <<<"$(printf '%s\n' "$proof" | head -1)"
			say "PROOF: procedure $id ($ptype, $pstate) has writes by $leader, the killed leader, and by $new, the new leader: $pruns"
			show proc get "$id" --history
		else
			fail "no procedure was resumed by the new leader"
		fi
	else
		fail "proc list: $(tail -1 "$WORK/final.json.err")"
	fi

	step "Check that every region is OPEN exactly once (the region servers' own answers)"
	verify_regions
	regionservers_running || fail "a region server is not running"

	step "Restart the killed master ($leader)"
	restart_master "$leader"
	"$CHECK" ready --timeout "${DEMO_TIMEOUT}s" "$(master_ready_url "$leader")" | sed 's/^/    /' ||
		fail "$leader did not come back"
	show cluster status

	if declare -F extra_checks >/dev/null; then extra_checks; fi

	step "Result"
	if ((${#FAILURES[@]} == 0)); then
		say "PASS: $DEMO_TABLES tables x $DEMO_REGIONS regions created across a leader failover ($leader -> $new);"
		say "      $(printf '%s\n' "$proof" | grep -c .) procedures half done on $leader were finished by $new;"
		say "      new leader elected $elapsed ms after the kill, first new procedure done $first_ms ms after;"
		say "      every region is open on exactly one region server."
		return 0
	fi
	say "FAILED (${#FAILURES[@]}):"
	for i in "${FAILURES[@]}"; do say "  - $i"; done
	return 1
}

# stop_creates: end the background clients (on an early exit).
stop_creates() {
	local p
	for p in "${CREATE_PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${CREATE_PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	CREATE_PIDS=()
}

# port_free PORT: succeed iff nothing listens on 127.0.0.1:PORT.
port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
