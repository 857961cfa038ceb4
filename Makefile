# Baton. `make test` is what CI runs (see .ci/run); `make bench` prints the
# benchmark figures quoted in README.md.
GO ?= go

.PHONY: all build test test-short test-integration test-deploy chaos chaos-upgrade fuzz bench bench-failover bench-scale bench-drills demo vet proto clean compose-up compose-down demo-failover demo-local

all: vet build test

# The version is the tag the checkout's HEAD carries, if any; otherwise the
# binary says the release line's pre-release (internal/version.Dev, e.g.
# 0.2.0-dev), a semantic version other masters are shown. The commit is the
# checkout's HEAD: `bin/baton version` prints both.
VERSION ?= $(shell git describe --tags --exact-match 2>/dev/null)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o bin/baton ./cmd/node

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

test:
	$(GO) test -race ./...

test-short:
	$(GO) test -short ./...

# The Helm chart (deploy/helm/baton), rendered and checked by Helm's Go
# library in deploy/'s own module, so that Helm and Kubernetes stay out of
# the main module's dependencies. It builds ./cmd/node to check the
# chart's flags against `baton agent -h`. Cold (empty module and build
# caches): the module download took 13 s, the test binary's compile 3 min
# of CPU (8 min wall on a 2-core machine shared at load 20); warm, ~20 s.
test-deploy:
	cd deploy && $(GO) test ./...

# Real agent processes on loopback: SIGKILL/SIGTERM of leaders, restarts,
# catch-up from the WAL and from snapshots, partitions (also part of test).
test-integration:
	$(GO) test -race -count=1 -timeout 6m ./integration/...

# The long fault-injection run (integration/chaos, as root for partitions):
# 50 leader kills, 20 region server kills, 10 of each partition and pause
# kind, with porcupine's check of the namespace history and the region
# invariant sampled throughout; a summary table at the end. Bounded by
# BATON_CHAOS_DURATION (default 45m); counts by BATON_CHAOS_LEADER_KILLS,
# BATON_CHAOS_RS_KILLS, BATON_CHAOS_ISOLATIONS, BATON_CHAOS_SPLITS,
# BATON_CHAOS_RS_CUTS, BATON_CHAOS_PAUSES, BATON_CHAOS_RS_PAUSES. After the
# faults, a liveness phase: everything converges within a stated bound.
# The seed draws the whole fault schedule up front (written to the
# artifacts directory as schedule-TestChaosLong.json, and as it ran to
# schedule-TestChaosLong.ran.json); a failing run prints how to replay it:
#   make chaos SEED=<seed> BATON_CHAOS_DURATION=... <counts>   same schedule
#   make chaos SCHEDULE=<dir>/schedule-TestChaosLong.ran.json  same timing
chaos:
	BATON_CHAOS_LONG=1 $(if $(SEED),BATON_CHAOS_NEMESIS_SEED=$(SEED)) $(if $(SCHEDULE),BATON_CHAOS_SCHEDULE=$(abspath $(SCHEDULE))) \
		$(GO) test -run '^TestChaosLong$$' -count=1 -v -timeout 120m ./integration/chaos/

# The long rolling-upgrade run (integration/upgrade): each release in
# integration/harness.Releases is built from git history, started with a
# 2,000-region table create, sleeps, a held lock, a crash recovery and a
# balance in flight, and upgraded process by process to this tree with a
# leader kill or pause after each step; a summary at the end.
chaos-upgrade:
	BATON_UPGRADE_LONG=1 BATON_REQUIRE_RELEASES=1 \
		$(GO) test -run '^TestRolling' -count=1 -v -timeout 60m ./integration/upgrade/

# A short run of the WAL reader fuzz target (seed corpus in store/testdata).
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzReadSegment -fuzztime 1000000x ./store/

# Benchmarks. BATON_WAL_LOAD_PROCS=1000000 runs the full 1 M-procedure
# WAL load case (about 5.5 GB of segments on disk).
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1s ./scheduler/
	$(GO) test -run '^$$' -bench BenchmarkWALAppend -benchtime 3000x ./store/
	$(GO) test -run '^$$' -bench BenchmarkWALLoad -benchtime 1x -timeout 30m ./store/
	$(GO) test -run '^$$' -bench BenchmarkExecutor -benchtime 5000x ./procedure/
	$(GO) test -run '^$$' -bench BenchmarkRaftStore -benchtime 2000x ./raftfsm/
	$(GO) test -run '^$$' -bench BenchmarkStepCommit -benchtime 8000x ./cluster/
	$(GO) test -run '^$$' -bench BenchmarkReads -benchtime 20000x ./cluster/admin/
	$(GO) test -run '^$$' -bench BenchmarkListProcedures -benchtime 30x ./cluster/admin/
	$(GO) test -run '^$$' -bench BenchmarkAssignRegions -benchtime 1x ./cluster/domain/
	$(GO) test -run '^$$' -bench BenchmarkDispatch -benchtime 10x ./dispatch/

# Failover timing: SIGKILL the leader of a loaded 3-node cluster 20 times.
bench-failover:
	BATON_FAILOVER_BENCH=20 $(GO) test -run '^TestFailoverTiming$$' -count=1 -v -timeout 10m ./integration/

# Scale: real 3-master clusters with 10 k and 100 k regions (BENCH_REGIONS
# for others: at 100 k each master holds 0.3-0.4 GB, so 1000000 wants up
# to 10 GB for the three and an hour or more); the table and the cost growth
# per 10x of BENCHMARKS.md. BENCH_SCALE_FLAGS adds flags
# (e.g. --json, --keep, --skip crash).
BENCH_REGIONS ?= 10000,100000
bench-scale: build
	bin/baton bench scale --regions $(BENCH_REGIONS) --commit $(BENCH_SCALE_FLAGS)

# Disaster drills (issue 31): save/restore, quorum recovery and a replaced
# disk, timed, at DRILL_REGIONS regions (the CI runs them at 200). Each
# drill logs its timings on a line starting "drill:" (grep it).
DRILL_REGIONS ?= 10000
bench-drills:
	BATON_DRILL_REGIONS=$(DRILL_REGIONS) $(GO) test -run '^TestDrill' -count=1 -v -timeout 60m ./integration/

demo:
	$(GO) run ./cmd/node demo

# Docker Compose: 3 masters and 3 region servers (docker-compose.yml) from a
# FROM-scratch image around the static bin/baton; no image is pulled. Every
# channel runs mutual TLS with the certificates scripts/compose-tls.sh makes
# in docker/tls. Client:
#   export BATON_TLS_CA=docker/tls/baton-ca.pem BATON_TLS_CERT=docker/tls/client-operator.pem BATON_TLS_KEY=docker/tls/client-operator-key.pem
#   bin/baton cluster status --addr 127.0.0.1:17070,127.0.0.1:17170,127.0.0.1:17270
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE_PROJECT ?= baton

compose-up: build
	scripts/compose-tls.sh
	$(COMPOSE) -p $(COMPOSE_PROJECT) build
	$(COMPOSE) -p $(COMPOSE_PROJECT) up -d
	@echo "masters (mutual TLS): export BATON_TLS_CA=docker/tls/baton-ca.pem BATON_TLS_CERT=docker/tls/client-operator.pem BATON_TLS_KEY=docker/tls/client-operator-key.pem"
	@echo "  bin/baton cluster status --addr 127.0.0.1:17070,127.0.0.1:17170,127.0.0.1:17270"

compose-down:
	$(COMPOSE) -p $(COMPOSE_PROJECT) down -v --remove-orphans

# The failover demo: kill the leader while procedures it has been writing
# are half done (a 40-step witness and table creates); print the time to
# the new leader (at most 1.5 s, or the demo fails) and to the first new
# procedure done; fail unless a procedure has writes by both the killed and
# the new leader (printed, with its timeline, as the proof); then check
# from the region servers' own answers that every region is open once.
# Afterwards it removes what it made (containers, network, volumes, its
# baton-demo:dev image); KEEP=1 keeps the cluster running instead.
KEEP ?=
DEMO_KEEP_ENV = $(if $(filter 1,$(KEEP)),DEMO_KEEP=1)
demo-failover:
	$(DEMO_KEEP_ENV) scripts/demo-failover.sh

# The same demo with local processes, for machines without a Docker engine
# (KEEP=1 leaves them running).
demo-local:
	$(DEMO_KEEP_ENV) scripts/demo-local.sh

# Regenerates the committed protobuf code (needs protoc: Debian's
# protobuf-compiler; protoc-gen-go is installed from the Go proxy).
proto:
	command -v protoc >/dev/null || { apt-get update && apt-get install -y protobuf-compiler; }
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
	$(GO) generate ./proto/...

clean:
	rm -rf bin baton-data
