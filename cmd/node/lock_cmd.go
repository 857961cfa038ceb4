package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
)

var lockUsage = `usage: baton lock <command> [flags]

commands:
  acquire --kind K --name N [--name N2 ...] [--exclusive] [--holder H] [--lease D]
          [--keepalive | -- COMMAND [ARGS...]]
                    take a shared (or exclusive) lock on a namespace, a table
                    (NAME or NS:NAME) or regions; it is held by a lease that
                    must be renewed (default 5s): --keepalive renews it until
                    interrupted, then releases it; '-- COMMAND' runs COMMAND
                    (with BATON_LOCK_ID set) once the lock is held, holds it
                    until COMMAND exits (also after Ctrl-C, which reaches
                    COMMAND too), releases it and exits as COMMAND did; if the
                    lock is lost meanwhile COMMAND gets SIGTERM (SIGKILL after
                    --kill-after) and the exit is 1. A lock whose holder goes
                    away without releasing it is free when its lease runs out
  heartbeat ID      renew a lock's lease
  release ID        release a lock (or stop waiting for it)
` + fmt.Sprintf(clientFlagsNote, "lock")

// parseWithCommand parses lock acquire's flags; what follows the "--"
// that ends them (not a "--" given as a flag's value) is the command to
// run under the lock. It takes no other arguments.
func (e *command) parseWithCommand(args []string) (argv []string, code int, ok bool) {
	if u, ok := e.fs.Output().(*usageOut); ok {
		u.help = helpAsked(args)
	}
	if err := parseFlags(e.fs, args); err != nil {
		return nil, parseFailed(err), false
	}
	rest := e.fs.Args()
	if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
		if len(rest) == 0 {
			return nil, e.fail(usagef("nothing after --: give the command to run while the lock is held")), false
		}
		return rest, exitOK, true
	}
	if len(rest) > 0 {
		return nil, e.fail(usagef("takes no arguments, got %q (a command to run under the lock goes after --)", rest)), false
	}
	return nil, exitOK, true
}

// defaultCLILockLease is the lease the CLI asks for: short, because a
// command that holds a lock heartbeats for as long as it lives, and a lock
// whose holder went away must not block other work for long.
const defaultCLILockLease = 5 * time.Second

var lockAdvice = map[codes.Code]string{
	codes.InvalidArgument:    invalidAdvice,
	codes.NotFound:           "no such lock: it may have been released or expired and then forgotten; acquire a new one",
	codes.FailedPrecondition: "the lock's state does not allow this",
}

// lockAcquireAdvice: acquiring, NOT_FOUND names what was to be locked, not
// a lock.
var lockAcquireAdvice = map[codes.Code]string{
	codes.InvalidArgument:    invalidAdvice,
	codes.NotFound:           "nothing by that name to lock: list the regions with 'baton region list' and the tables with 'baton table list'",
	codes.FailedPrecondition: lockAdvice[codes.FailedPrecondition],
}

func init() {
	topLevel.add(topCommand{
		name: "lock", rank: 100, run: (*cli).lock,
		summary: `acquire --kind K --name N [--exclusive] [--keepalive], heartbeat ID,
release ID`,
	})
}

func (c *cli) lock(args []string) int {
	return c.subcommands("lock", lockUsage, args, map[string]func([]string) int{
		"acquire":   c.lockAcquire,
		"heartbeat": func(a []string) int { return c.lockByID("heartbeat", a) },
		"release":   func(a []string) int { return c.lockByID("release", a) },
	})
}

// namesFlag collects repeated --name.
type namesFlag []string

func (n *namesFlag) String() string { return strings.Join(*n, ",") }

func (n *namesFlag) Set(s string) error {
	if s = strings.TrimSpace(s); s == "" {
		return fmt.Errorf("empty name")
	}
	*n = append(*n, s)
	return nil
}

// lockJSON is the --json document of every lock command. id and lock_id
// are both the lock's id.
type lockJSON struct {
	ID             uint64 `json:"id"`
	LockID         uint64 `json:"lock_id"`
	State          string `json:"state"`
	LeaseTimeoutMs int64  `json:"lease_timeout_ms"`
}

func toLockJSON(r *adminpb.LockResponse) lockJSON {
	return lockJSON{ID: r.GetLockId(), LockID: r.GetLockId(), State: r.GetState(), LeaseTimeoutMs: r.GetLeaseTimeoutMs()}
}

var lockKinds = []string{client.LockNamespace, client.LockTable, client.LockRegion}

// defaultHolder names the lock's holder when --holder is not given: who
// and where, enough to find the process holding a lock.
func (c *cli) defaultHolder() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s@%s:%d", c.userName(), host, os.Getpid())
}

func (c *cli) lockAcquire(args []string) int {
	e := c.command("lock acquire", "--kind namespace|table|region --name N [--name N2 ...] [--exclusive] [--holder H] [--description D] [--nonce N] [--lease D] [--keepalive | -- COMMAND [ARGS...]]", lockAcquireAdvice)
	kind := e.fs.String("kind", "", "what to lock: namespace, table or region")
	var names namesFlag
	e.fs.Var(&names, "name", "the namespace, the table (NAME or NS:NAME) or a region to lock (repeatable for regions)")
	exclusive := e.fs.Bool("exclusive", false, "lock exclusively (default: shared)")
	holder := e.fs.String("holder", "", "who holds the lock (informational; default user@host:pid)")
	desc := e.fs.String("description", "", "why the lock is held (informational)")
	keepalive := e.fs.Bool("keepalive", false, "renew the lease until interrupted (SIGINT, SIGTERM), then release the lock; with --json the one document is printed once the lock is ACQUIRED")
	lease := e.fs.Duration("lease", defaultCLILockLease, "how long the lock outlives this command's last heartbeat: a lock whose holder goes away is free this long after (1s to 1h, rounded up to the master's steps; longer to renew it by hand with 'baton lock heartbeat')")
	nonce := e.nonceFlag()
	killAfter := e.fs.Duration("kill-after", 10*time.Second, "with a command: if the lock is lost while it runs, it is sent SIGTERM, and SIGKILL this long after if it has not exited")
	argv, code, ok := e.parseWithCommand(args)
	if !ok {
		return code
	}
	*kind = strings.ToLower(strings.TrimSpace(*kind))
	switch {
	case argv != nil && *keepalive:
		return e.fail(usagef("--keepalive and a command are two ways to hold the lock: give one"))
	case argv != nil && e.cf.json:
		return e.fail(usagef("--json is not taken with a command: the command's output is the output"))
	case *killAfter <= 0:
		return e.fail(usagef("--kill-after %v: want a positive duration", *killAfter))
	case *lease < time.Second || *lease > time.Hour:
		return e.fail(usagef("--lease %v: want between 1s and 1h", *lease))
	case *kind == "":
		return e.fail(usagef("--kind is required: one of %s", strings.Join(lockKinds, ", ")))
	case !slices.Contains(lockKinds, *kind):
		return e.fail(usagef("--kind %q: want one of %s", *kind, strings.Join(lockKinds, ", ")))
	case len(names) == 0:
		return e.fail(usagef("--name is required: what %s to lock", *kind))
	case *kind != client.LockRegion && len(names) > 1:
		return e.fail(usagef("a %s lock takes one --name, got %d (only region locks take several)", *kind, len(names)))
	}
	if *kind == client.LockNamespace {
		if err := checkName("namespace", names[0]); err != nil {
			return e.fail(err)
		}
	}
	if *kind == client.LockTable {
		// The API names tables "ns:name"; accept NAME as the table commands do.
		ns, name, err := splitTable(names[0], "")
		if err != nil {
			return e.fail(err)
		}
		names[0] = ns + ":" + name
	}
	if *holder == "" {
		*holder = c.defaultHolder()
	}
	cl, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	defer cl.Close()
	started := time.Now()
	r, err := cl.AcquireLockWith(c.ctx, &adminpb.AcquireLockRequest{
		Kind: *kind, Names: names, Exclusive: *exclusive, Holder: *holder, Description: *desc, Nonce: *nonce,
		LeaseMs: lease.Milliseconds(),
	})
	if err != nil {
		return e.fail(err)
	}
	mode := "shared"
	if *exclusive {
		mode = "exclusive"
	}
	what := fmt.Sprintf("%s %s lock on %s", mode, *kind, strings.Join(names, ", "))
	if *keepalive || argv != nil {
		// An explicit --timeout bounds the wait for the lock (not how
		// long it is then held): a script that said 3s does not want its
		// command run 25 s later.
		var waitLimit time.Duration
		if flagSet(e.fs, "timeout") {
			waitLimit = e.cf.timeout
		}
		return e.keepalive(cl, r, what, *lease, argv, *killAfter, started.Add(waitLimit), waitLimit)
	}
	if e.cf.json {
		c.printJSON(toLockJSON(r))
	} else {
		id := r.GetLockId()
		fmt.Fprintf(c.stdout, "lock %d %s: %s\n", id, r.GetState(), what)
		if r.GetState() == client.LockWaiting {
			fmt.Fprintf(c.stdout, "  waiting for a conflicting lock to be released\n")
		}
		if client.LockHeld(r.GetState()) {
			fmt.Fprintf(c.stdout, "  renew its lease within %s with 'baton lock heartbeat %d'; release it with 'baton lock release %d'\n",
				leaseString(r), id, id)
		}
	}
	return c.lockOutcome(r, "")
}

// leaseString says how long r's lease lasts: "2s".
func leaseString(r *adminpb.LockResponse) string {
	if ms := r.GetLeaseTimeoutMs(); ms > 0 {
		return (time.Duration(ms) * time.Millisecond).String()
	}
	return "the lease time (the cluster did not say)"
}

// lockOutcome is the exit code of a lock command that got answer r: a lock
// that is neither waiting nor held (nor released as asked) is lost, exit 1.
func (c *cli) lockOutcome(r *adminpb.LockResponse, released string) int {
	st := r.GetState()
	if client.LockHeld(st) || st == released {
		return exitOK
	}
	switch st {
	case client.LockExpired:
		fmt.Fprintf(c.stderr, "lock %d EXPIRED: its lease ran out before it was renewed, and it was released without its holder\n", r.GetLockId())
	default:
		fmt.Fprintf(c.stderr, "lock %d is %s: it is no longer held\n", r.GetLockId(), st)
	}
	return exitFailed
}

// heartbeatEvery is how often keepalive renews a lease: three times per
// lease, so that one lost heartbeat (or a leader election) does not cost
// the lock.
func heartbeatEvery(lease time.Duration) time.Duration {
	if lease <= 0 {
		return time.Second // the cluster did not say: a common lease is many seconds
	}
	return min(max(lease/3, 10*time.Millisecond), 10*time.Second)
}

// keepalive renews lock r's lease until the command is interrupted, then
// releases it. Exit 0 once released; 1 if the lock was lost (expired or
// released by someone else); 3 if no heartbeat got through for a whole
// lease, after which the lock is expired as far as anyone can tell.
//
// With argv, it runs that command once the lock is ACQUIRED and holds the
// lock exactly while it runs (see holdingCommand).
//
// With waitLimit > 0, a lock still WAITING at waitUntil is withdrawn from
// its queue and the command exits 3 without running argv.
func (e *command) keepalive(cl *client.Client, r *adminpb.LockResponse, what string, asked time.Duration, argv []string, killAfter time.Duration, waitUntil time.Time, waitLimit time.Duration) int {
	c := e.c
	// SIGINT cancels c.ctx (see run); SIGTERM is caught here, so that the
	// two can be told apart for the command.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	defer signal.Stop(term)
	id := r.GetLockId()
	lease := time.Duration(r.GetLeaseTimeoutMs()) * time.Millisecond
	// With a command, stdout is the command's: the lock's lines go to
	// stderr.
	out := c.stdout
	if argv != nil {
		out = c.stderr
	}
	printed := false // the one --json document
	show := func(r *adminpb.LockResponse) {
		if !e.cf.json {
			fmt.Fprintf(out, "%s lock %d %s: %s\n", time.Now().Format("15:04:05.000"), id, r.GetState(), what)
		} else if !printed && (r.GetState() == client.LockAcquired || !client.LockHeld(r.GetState())) {
			c.printJSON(toLockJSON(r))
			printed = true
		}
	}
	show(r)
	if !client.LockHeld(r.GetState()) {
		return c.lockOutcome(r, "")
	}
	if !e.cf.json {
		until := "interrupt to release it"
		if argv != nil {
			until = "released when the command exits"
		}
		fmt.Fprintf(out, "  renewing its lease (%s) every %s; %s\n", leaseString(r), heartbeatEvery(lease).Round(time.Millisecond), until)
	}
	var child *runningCommand
	// lost ends the command that ran on the promise of the lock: SIGTERM,
	// then SIGKILL if it is still there killAfter later.
	lost := func(code int) int {
		if child != nil {
			fmt.Fprintf(c.stderr, "baton lock acquire: lock %d is lost: stopping %s with SIGTERM (SIGKILL after %s)\n", id, argv[0], killAfter)
			child.stop(killAfter)
		}
		return code
	}
	// Heartbeats outlive an interrupt while the command is still running:
	// the lock is held until the command is gone, not until baton was
	// told to stop.
	hbCtx := context.WithoutCancel(c.ctx)
	interrupted := c.ctx.Done()
	// deadline is when the lease runs out if no heartbeat gets through: a
	// heartbeat is retried (through failovers) until then, and no longer.
	deadline := time.Now().Add(lease)
	tick := time.NewTicker(heartbeatEvery(lease))
	defer tick.Stop()
	state := r.GetState()
	var gaveUp <-chan time.Time
	if waitLimit > 0 && state == client.LockWaiting {
		t := time.NewTimer(time.Until(waitUntil))
		defer t.Stop()
		gaveUp = t.C
	}
	for {
		if argv != nil && child == nil && state == client.LockAcquired {
			var err error
			if child, err = startCommand(argv, id, c.stdout, c.stderr); err != nil {
				fmt.Fprintf(c.stderr, "baton lock acquire: %v\n", err)
				e.releaseAtEnd(cl, id, printed, out)
				return startFailed(err)
			}
		}
		var exited <-chan struct{}
		if child != nil {
			exited = child.done
		}
		select {
		case <-interrupted:
			interrupted = nil
			if child == nil {
				code := e.releaseAtEnd(cl, id, printed, out)
				if argv != nil && code == exitOK {
					return exitInterrupted // the command never ran
				}
				return code
			}
			// Ctrl-C reached the command too: it shares baton's process
			// group. Wait for it to end, holding the lock meanwhile.
			fmt.Fprintf(c.stderr, "baton lock acquire: interrupted: waiting for %s to exit; the lock is held until then\n", argv[0])
			continue
		case <-term:
			if child == nil {
				code := e.releaseAtEnd(cl, id, printed, out)
				if argv != nil && code == exitOK {
					return 128 + int(syscall.SIGTERM) // the command never ran
				}
				return code
			}
			child.signal(syscall.SIGTERM) // sent to baton alone: pass it on
			continue
		case <-exited:
			if code := e.releaseAtEnd(cl, id, printed, out); code != exitOK {
				// Released as EXPIRED: the lock ran out before the command
				// ended, whatever the command made of it.
				fmt.Fprintf(c.stderr, "baton lock acquire: lock %d was lost before %s ended\n", id, argv[0])
				return code
			}
			return child.exitCode()
		case <-gaveUp:
			gaveUp = nil
			if state != client.LockWaiting {
				continue
			}
			return e.withdrawWaiting(cl, id, waitLimit, printed)
		case <-tick.C:
		}
		hctx, cancel := hbCtx, context.CancelFunc(func() {})
		if lease > 0 {
			hctx, cancel = context.WithDeadline(hbCtx, deadline)
		}
		sent := time.Now()
		hr, err := cl.LockHeartbeatWith(hctx, &adminpb.LockRef{LockId: id, LeaseMs: asked.Milliseconds()})
		cancel()
		switch {
		case err != nil && lease > 0 && !time.Now().Before(deadline):
			fmt.Fprintf(c.stderr, "baton lock acquire: no heartbeat of lock %d got through for %s, its whole lease: it has expired (last error: %s)\n",
				id, lease, status.Convert(err).Message())
			return lost(exitUnavailable)
		case err != nil && (status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded) && lease > 0:
			continue // the lease has time left: try again at the next tick
		case err != nil:
			return lost(e.failAfter(err, printed))
		}
		if l := time.Duration(hr.GetLeaseTimeoutMs()) * time.Millisecond; l > 0 && l != lease {
			// The leader's lease differs (a new leader, configured
			// otherwise): heartbeat at its pace.
			lease = l
			tick.Reset(heartbeatEvery(lease))
		}
		// The master renewed the lease no earlier than the heartbeat left.
		deadline = sent.Add(lease)
		if hr.GetState() != state {
			state = hr.GetState()
			show(hr)
			if state == client.LockAcquired {
				gaveUp = nil
			}
		}
		if !client.LockHeld(state) {
			return lost(c.lockOutcome(hr, ""))
		}
	}
}

// withdrawWaiting takes lock id, still WAITING when the explicit --timeout
// ran out, out of its queue: exit 3, as any other timeout. A lock that was
// granted in the same moment is let go all the same: the command was not
// run, and will not be.
func (e *command) withdrawWaiting(cl *client.Client, id uint64, waitLimit time.Duration, printed bool) int {
	c := e.c
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), e.cf.timeout)
	defer cancel()
	r, err := cl.ReleaseLock(ctx, id)
	if err != nil {
		fmt.Fprintf(c.stderr, "baton lock acquire: timed out after %s waiting for lock %d, and could not withdraw it (it expires when its lease runs out): %s\n",
			waitLimit, id, status.Convert(err).Message())
		return exitUnavailable
	}
	if e.cf.json && !printed {
		c.printJSON(timedOutLockJSON{lockJSON: toLockJSON(r), Error: fmt.Sprintf("timed out after %s waiting for the lock", waitLimit), Code: "DEADLINE_EXCEEDED"})
	}
	fmt.Fprintf(c.stderr, "baton lock acquire: timed out after %s waiting for lock %d: withdrawn from the queue (%s)\n", waitLimit, id, r.GetState())
	return exitUnavailable
}

// timedOutLockJSON is the --json document of a lock acquire that gave up
// waiting.
type timedOutLockJSON struct {
	lockJSON
	Error string `json:"error"`
	Code  string `json:"code"`
}

// releaseAtEnd releases lock id once keepalive was interrupted, within the
// command's --timeout (the command's context is done by then).
func (e *command) releaseAtEnd(cl *client.Client, id uint64, printed bool, out io.Writer) int {
	c := e.c
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), e.cf.timeout)
	defer cancel()
	r, err := cl.ReleaseLock(ctx, id)
	if err != nil {
		fmt.Fprintf(c.stderr, "baton lock acquire: could not release lock %d; it expires when its lease runs out\n", id)
		return e.failAfter(err, printed)
	}
	if e.cf.json {
		if !printed {
			c.printJSON(toLockJSON(r))
		}
	} else {
		fmt.Fprintf(out, "%s lock %d %s\n", time.Now().Format("15:04:05.000"), id, r.GetState())
	}
	return c.lockOutcome(r, client.LockReleased)
}

func (c *cli) lockByID(verb string, args []string) int {
	e := c.command("lock "+verb, "ID", lockAdvice)
	force := e.fs.Bool("force", false, forceUsage("lock", "acquired"))
	pos, code, ok := e.parse(args, 1, "lock ID")
	if !ok {
		return code
	}
	id, err := strconv.ParseUint(pos[0], 10, 64)
	if err != nil || id == 0 {
		return e.fail(usagef("lock id %q: want a positive integer, as printed by 'baton lock acquire'", pos[0]))
	}
	cl, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	defer cl.Close()
	var r *adminpb.LockResponse
	released := ""
	var act []client.ActOption
	if *force {
		act = append(act, client.Force())
	}
	if verb == "heartbeat" {
		r, err = cl.LockHeartbeat(c.ctx, id, act...)
	} else {
		r, err = cl.ReleaseLock(c.ctx, id, act...)
		released = client.LockReleased
	}
	if err != nil {
		return e.fail(err)
	}
	if e.cf.json {
		c.printJSON(toLockJSON(r))
	} else {
		fmt.Fprintf(c.stdout, "lock %d %s", id, r.GetState())
		if verb == "heartbeat" && client.LockHeld(r.GetState()) {
			fmt.Fprintf(c.stdout, "; lease renewed for %s", leaseString(r))
		}
		fmt.Fprintln(c.stdout)
	}
	return c.lockOutcome(r, released)
}

// failAfter is fail for a command that may have printed its one --json
// document already: then the error goes to stderr only.
func (e *command) failAfter(err error, printed bool) int {
	if printed {
		e.cf.json = false
	}
	return e.fail(err)
}

// forceUsage is the help of --force on a command acting on a procedure or
// a lock (what) that another identity submitted or acquired (how).
func forceUsage(what, how string) string {
	return fmt.Sprintf("act on a %s another identity %s (with access control on it is theirs): needs permission admin, and the audit trail records it", what, how)
}
