package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	semver "github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/scheduler"
	"github.com/baton-dev/baton/store"
)

// provision is the demo's state machine: allocate, configure N servers
// (as child procedures, in parallel), activate. With Fail set, activation
// fails and everything done so far is rolled back, newest first.
type provision struct {
	procedure.StateMachine
	Name    string
	Servers int
	Fail    bool
}

const (
	stAllocate int32 = iota
	stConfigure
	stActivate
)

func (p *provision) InitialState() int32 { return stAllocate }

func (p *provision) ExecuteState(ctx *procedure.Context, s int32) (procedure.Flow, error) {
	env := ctx.Env.(*demoEnv)
	env.pause()
	switch s {
	case stAllocate:
		env.effect(ctx, "allocate "+p.Name)
		p.SetNextState(stConfigure)
	case stConfigure:
		for i := 0; i < p.Servers; i++ {
			ctx.AddChild(&configure{Service: p.Name, Server: fmt.Sprintf("%s-srv%d", p.Name, i)})
		}
		p.SetNextState(stActivate)
	case stActivate:
		if p.Fail {
			return procedure.NoMoreState, errors.New("activation refused by the load balancer")
		}
		env.effect(ctx, "activate "+p.Name)
		return procedure.NoMoreState, nil
	}
	return procedure.HasMoreState, nil
}

func (p *provision) RollbackState(ctx *procedure.Context, s int32) error {
	env := ctx.Env.(*demoEnv)
	switch s {
	case stAllocate:
		env.effect(ctx, "release "+p.Name)
	case stActivate:
		env.effect(ctx, "deactivate "+p.Name)
	}
	return nil
}

func (p *provision) Locks() []scheduler.Lock {
	return scheduler.TableLocks("demo", p.Name, scheduler.Exclusive)
}

func (p *provision) HoldLock() bool { return true }

// configure is a two-step child: write the config, then restart.
type configure struct {
	procedure.Base
	Service, Server string
	Step            int // steps done
}

func (c *configure) Execute(ctx *procedure.Context) (procedure.Step, error) {
	env := ctx.Env.(*demoEnv)
	env.pause()
	if c.Step == 0 {
		env.effect(ctx, "write config "+c.Server)
		c.Step = 1
		return procedure.More(), nil
	}
	env.effect(ctx, "restart "+c.Server)
	c.Step = 2
	return procedure.Done(), nil
}

// Rollback runs once per executed step, newest first.
func (c *configure) Rollback(ctx *procedure.Context) error {
	env := ctx.Env.(*demoEnv)
	if c.Step == 2 {
		env.effect(ctx, "stop "+c.Server)
	} else {
		env.effect(ctx, "remove config "+c.Server)
	}
	c.Step--
	return nil
}

type demoEnv struct {
	delay time.Duration
	out   io.Writer
	mu    sync.Mutex
	json  bool
}

func (e *demoEnv) pause() { time.Sleep(e.delay) }

func (e *demoEnv) effect(ctx *procedure.Context, what string) {
	if e.json {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(e.out, "  proc %-3d %s\n", ctx.ID(), what)
}

type demoResult struct {
	ID      uint64 `json:"id"`
	Name    string `json:"name"`
	State   string `json:"state"`
	Error   string `json:"error,omitempty"`
	Resumed bool   `json:"resumed"`
}

func init() {
	topLevel.add(topCommand{
		name: "demo", rank: 130, run: func(c *cli, args []string) int { return demo(args, c.stdout, c.stderr) },
		summary: `run crash-proof procedures in this process, on a WAL in a fresh
temporary directory (or --data-dir DIR); --crash-after N stops the
process mid-way, and a run with the same --data-dir resumes exactly
where it stopped`,
	})
}

func demo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton demo", flag.ContinueOnError)
	newUsageOut(fs, stdout, stderr)
	fs.Output().(*usageOut).help = helpAsked(args)
	dataDir := fs.String("data-dir", "", "directory for the procedure WAL, kept across runs: a run resumes what a crashed one left (default: a fresh temporary directory, removed after a run that was not crashed on purpose)")
	crashAfter := fs.Int("crash-after", 0, "exit abruptly after this many persisted transitions (0: never), to show recovery")
	delay := fs.Duration("step-delay", 150*time.Millisecond, "time each step takes, so the run can be watched")
	asJSON := fs.Bool("json", false, "print one JSON document instead of the narrative")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: baton demo [--data-dir DIR] [--crash-after N] [--step-delay D] [--json]\n\n"+
			"runs crash-proof procedures in this process, on a WAL of its own\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return parseFailed(err)
	}
	if fs.NArg() > 0 || *crashAfter < 0 || *delay < 0 {
		fmt.Fprintln(stderr, "baton demo: takes no arguments; --crash-after and --step-delay must not be negative")
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "baton", Level: hclog.Warn, Output: stderr})
	// A fresh directory unless one is named: a run must not silently pick
	// up an earlier run's results, nor an agent's data.
	fresh := *dataDir == ""
	if fresh {
		d, err := os.MkdirTemp("", "baton-demo-")
		if err != nil {
			fmt.Fprintf(stderr, "baton demo: a temporary directory: %v\n", err)
			return 1
		}
		*dataDir = d
	}
	// Deferred first, so it runs after the WAL is closed. A simulated
	// crash (os.Exit) skips it: the directory is what the next run resumes.
	defer func() {
		if fresh {
			if err := os.RemoveAll(*dataDir); err != nil {
				logger.Warn("removing the demo's temporary directory", "dir", *dataDir, "error", err)
			}
		}
	}()
	walDir := filepath.Join(*dataDir, "wal")
	cfg := store.DefaultWALConfig(walDir)
	cfg.Logger = logger
	wal, err := store.OpenWAL(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "baton demo: opening the WAL in %s: %v\n", walDir, err)
		return 1
	}
	defer wal.Close()

	reg := procedure.NewRegistry()
	reg.MustRegister("provision", 1, func() procedure.Procedure { return &provision{} })
	reg.MustRegister("configure", 1, func() procedure.Procedure { return &configure{} })
	env := &demoEnv{delay: *delay, out: stdout, json: *asJSON}
	exec, err := procedure.New(procedure.Config{Store: wal, Registry: reg, Env: env, Logger: logger, RecordFormat: semver.Newest})
	if err != nil {
		fmt.Fprintf(stderr, "baton demo: %v\n", err)
		return 1
	}
	var transitions atomic.Int64
	if *crashAfter > 0 {
		exec.AddListener(func(procedure.Info) {
			if transitions.Add(1) == int64(*crashAfter) {
				// The directory stays: it is what the next run resumes.
				fmt.Fprintf(stderr, "\nsimulated crash after %d persisted transitions; to resume: baton demo --data-dir %s\n", *crashAfter, *dataDir)
				os.Exit(1)
			}
		})
	}
	if err := exec.Start(); err != nil {
		fmt.Fprintf(stderr, "baton demo: loading %s: %v\n", walDir, err)
		return 1
	}
	defer exec.Stop(context.Background())
	live := exec.List(procedure.Filter{RootsOnly: true})
	resumed := map[uint64]bool{}
	for _, i := range live {
		if !i.State.Terminal() {
			resumed[i.ID] = true
		}
	}
	if !*asJSON {
		if fresh {
			fmt.Fprintf(stdout, "data directory %s (fresh; --data-dir DIR keeps one across runs)\n", *dataDir)
		} else {
			fmt.Fprintf(stdout, "data directory %s (given: a run resumes what the last one left)\n", *dataDir)
		}
		fmt.Fprintf(stdout, "WAL in %s: %d procedures loaded, %d unfinished will resume, %d problems\n",
			walDir, len(live), len(resumed), len(exec.Problems()))
	}

	wanted := []struct {
		nonce string
		p     *provision
	}{
		{"demo-web", &provision{Name: "web", Servers: 2}},
		{"demo-db", &provision{Name: "db", Servers: 2, Fail: true}},
	}
	var results []demoResult
	status := 0
	for _, w := range wanted {
		id, err := exec.Submit(w.p, procedure.SubmitOptions{Nonce: w.nonce, Owner: "demo"})
		if err != nil {
			fmt.Fprintf(stderr, "baton demo: submit %s: %v\n", w.p.Name, err)
			return 1
		}
		results = append(results, demoResult{ID: id, Name: w.p.Name, Resumed: resumed[id]})
	}
	for i := range results {
		info, err := exec.Wait(context.Background(), results[i].ID)
		if err != nil {
			fmt.Fprintf(stderr, "baton demo: waiting for %d: %v\n", results[i].ID, err)
			return 1
		}
		results[i].State, results[i].Error = info.State.String(), info.Error
		want := procedure.Success
		if wanted[i].p.Fail {
			want = procedure.RolledBack
		}
		if info.State != want {
			status = 1
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		st := wal.Stats()
		_ = enc.Encode(map[string]any{"procedures": results, "data_dir": *dataDir, "fresh_data_dir": fresh, "wal": map[string]any{
			"records": st.Records, "syncs": st.Syncs, "bytes": st.Bytes, "segments": st.Segments,
			"segments_deleted": st.SegmentsDeleted, "stragglers_rewritten": st.StragglersRewritten,
		}})
		return status
	}
	fmt.Fprintln(stdout, "\nID   NAME  STATE       RESUMED  ERROR")
	for _, r := range results {
		fmt.Fprintf(stdout, "%-4d %-5s %-11s %-8v %s\n", r.ID, r.Name, r.State, r.Resumed, r.Error)
	}
	if fresh {
		fmt.Fprintf(stdout, "\n%s removed. With --data-dir DIR the WAL stays, and a run with --crash-after N can be resumed by running again with the same --data-dir.\n", *dataDir)
	} else {
		fmt.Fprintf(stdout, "\nResults are kept 15 min: running the demo again with --data-dir %s within that time returns the same ids (nonces).\n", *dataDir)
	}
	return status
}
