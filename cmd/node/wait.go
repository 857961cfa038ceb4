package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
)

// exitInterrupted is the exit code of a command stopped by Ctrl-C (SIGINT),
// as shells report it: 128 + the signal's number.
const exitInterrupted = 130

// flagSet reports whether name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// watch follows procedure id until it is terminal, printing (human mode
// only) each state it passes through on stdout and, on stderr, what the
// master says it waits for whenever that changes, so that a wait that
// cannot progress says why. An explicit --timeout bounds the whole wait;
// without one a wait lasts as long as the procedure, since the default
// timeout is about reaching a leader, not about how long a procedure may
// take. ok is false when the command is over and code is its exit code,
// already reported.
func (c *cli) watch(cmd string, fs *flag.FlagSet, cf *clientFlags, cl *client.Client, id uint64) (p *adminpb.Procedure, code int, ok bool) {
	ctx := c.ctx
	if fs != nil && flagSet(fs, "timeout") {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(c.ctx, cf.timeout)
		defer cancel()
	}
	var lastState, lastWhy, printed string
	if c.watching != nil {
		c.watching(id)
	}
	prog := newProgressLine(c.stdout, id)
	p, err := cl.Watch(ctx, id, func(p *adminpb.Procedure) error {
		if !cf.json && !client.Terminal(p.GetState()) {
			if p.GetState() != lastState {
				prog.clear()
				fmt.Fprintf(c.stdout, "  %s %s%s\n", time.Now().Format("15:04:05.000"), p.GetState(), prog.plainSuffix(p))
			}
			// Running and queued are progress; printing each return to a
			// reason already shown would repeat it at every step.
			if w := p.GetWaitingFor(); w != "" && w != "running" && w != "queued" && w != printed {
				prog.clear()
				fmt.Fprintf(c.stderr, "procedure %d: %s\n", id, w)
				printed = w
			}
			prog.show(p)
		}
		lastState, lastWhy = p.GetState(), p.GetWaitingFor()
		return nil
	})
	prog.clear()
	if err == nil {
		return p, exitOK, true
	}
	again := fmt.Sprintf("procedure %d goes on in the cluster; 'baton proc wait %d' waits for it again", id, id)
	switch {
	case c.ctx.Err() != nil:
		return nil, c.stopWaiting(cf, id, "CANCELLED", exitInterrupted,
			fmt.Sprintf("interrupted while waiting for procedure %d", id), again), false
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		why := lastWhy
		switch {
		case why == "":
			why = "no answer from the cluster"
		case !strings.HasPrefix(why, "waiting for"):
			why = "waiting for: " + why
		}
		return nil, c.stopWaiting(cf, id, "DEADLINE_EXCEEDED", exitUnavailable,
			fmt.Sprintf("timed out after %v waiting for procedure %d (%s)", cf.timeout, id, why), again), false
	}
	return nil, c.finish(cmd, fs, cf, err), false
}

// stopWaiting reports a wait given up on the client's side (the procedure
// itself is not affected) and returns code.
func (c *cli) stopWaiting(cf *clientFlags, id uint64, codeName string, code int, msg, advice string) int {
	fmt.Fprintf(c.stderr, "%s\n  %s\n", msg, advice)
	if cf.json {
		// id: the procedure goes on; a script waits for it again by id.
		c.printJSON(map[string]any{"id": id, "error": map[string]any{"code": codeName, "message": msg, "exit_code": code}})
	}
	return code
}
