package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
)

// agent runs `node agent`: parses its flags, then runs the node until
// SIGINT or SIGTERM.
func (c *cli) agent(args []string) int {
	cfg, err := parseAgentFlags(args, c.getenv, c.stderr)
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(c.stderr, "node agent: %s\nrun 'node agent -h' for usage\n", ue.msg)
			return exitUsage
		}
		return parseFailed(err)
	}
	ctx, stop := signal.NotifyContext(c.ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := runAgent(ctx, cfg); err != nil {
		fmt.Fprintf(c.stderr, "node agent: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// errNotWired is returned by runAgent until the node, the admin server and
// the HTTP endpoints are put together here.
var errNotWired = errors.New("agent: not wired yet")

// runAgent starts a cluster.Node with the admin gRPC server and the HTTP
// endpoints, prints where they listen, and on ctx's end (SIGINT, SIGTERM)
// shuts down gracefully (leadership transfer first).
func runAgent(ctx context.Context, cfg agentConfig) error {
	_, _ = ctx, cfg
	return errNotWired
}
