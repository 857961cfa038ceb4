package main

import (
	"context"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

// interrupt ends a command's context on SIGTERM as well as on SIGINT
// (which ends c.ctx, see run), and says which of them did: a command that
// must clean up before it exits (a temporary file) is stopped the same way
// by Ctrl-C and by a service manager.
type interrupt struct {
	cancel context.CancelFunc
	ch     chan os.Signal
	term   atomic.Bool
	done   chan struct{}
}

// interruptible returns a context of c.ctx that SIGTERM ends too. Call
// stop when the command is over: SIGTERM kills the process again.
func (c *cli) interruptible() (context.Context, *interrupt) {
	ctx, cancel := context.WithCancel(c.ctx)
	in := &interrupt{cancel: cancel, ch: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(in.ch, syscall.SIGTERM)
	go func() {
		defer close(in.done)
		select {
		case <-in.ch:
			in.term.Store(true) // before cancel: whoever sees ctx end sees it
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, in
}

func (in *interrupt) stop() {
	signal.Stop(in.ch)
	in.cancel()
	<-in.done
}

// signal is the signal that ended the context: SIGTERM if one was caught,
// else SIGINT (c.ctx's end).
func (in *interrupt) signal() syscall.Signal {
	if in.term.Load() {
		return syscall.SIGTERM
	}
	return syscall.SIGINT
}

// signalName spells sig as a person sends it.
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}
