package main

import (
	"context"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

// interrupt ends a command's context on SIGTERM and SIGHUP as well as on
// SIGINT (which ends c.ctx, see run), and says which of them did: a
// command that must clean up before it exits (a temporary file) is stopped
// the same way by Ctrl-C, a service manager and a dropped ssh session.
type interrupt struct {
	cancel context.CancelFunc
	ch     chan os.Signal
	caught atomic.Int32 // the signal caught here; 0: none (SIGINT, if any, ended c.ctx)
	done   chan struct{}
}

// interruptible returns a context of c.ctx that SIGTERM and SIGHUP end
// too. Call stop when the command is over: they kill the process again.
func (c *cli) interruptible() (context.Context, *interrupt) {
	ctx, cancel := context.WithCancel(c.ctx)
	in := &interrupt{cancel: cancel, ch: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(in.ch, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		defer close(in.done)
		select {
		case sig := <-in.ch:
			if s, ok := sig.(syscall.Signal); ok {
				in.caught.Store(int32(s)) // before cancel: whoever sees ctx end sees it
			}
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

// signal is the signal that ended the context: the one caught here
// (SIGTERM, SIGHUP), else SIGINT (c.ctx's end).
func (in *interrupt) signal() syscall.Signal {
	if s := in.caught.Load(); s != 0 {
		return syscall.Signal(s)
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
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}
