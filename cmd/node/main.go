// Command baton (built from cmd/node: `go build -o baton ./cmd/node`) is
// Baton's single binary: the cluster agent (`baton agent`),
// the admin API's command-line client (`baton proc ...`, `baton cluster ...`,
// and for the domain `baton ns|table|region|rs|balance|lock ...`) and the
// embedded single-node demo of the procedure framework.
//
// Exit codes: 0 ok; 1 the operation failed (a procedure ended ROLLEDBACK,
// NOT_FOUND, FAILED_PRECONDITION, ...); 2 bad usage (flags, arguments,
// arguments the cluster refused as INVALID_ARGUMENT); 3 the cluster is
// unavailable (no leader answered in time); 130 and 143 a command that
// waits or transfers, stopped by SIGINT or SIGTERM (128 + the signal).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return (&cli{ctx: ctx, stdout: stdout, stderr: stderr, getenv: os.Getenv}).run(args)
}

// run runs the top-level command args[0] names (commands.go), or prints
// the main usage.
func (c *cli) run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, topLevel.usage())
		return exitUsage
	}
	if cmd, ok := topLevel.lookup(args[0]); ok {
		return cmd.run(c, args[1:])
	}
	if slices.Contains(helpWords, args[0]) {
		fmt.Fprint(c.stdout, topLevel.usage())
		return exitOK
	}
	fmt.Fprintf(c.stderr, "baton: unknown command %q\n\n%s", args[0], topLevel.usage())
	return exitUsage
}
