// Command cluster runs the provisioning procedure of the provision example
// on three masters in this process, replicated through Raft on loopback:
// the leader runs it, and is killed while a state is half done; a new
// leader, elected from the two others, finds the procedure in the
// replicated log and finishes it. Which master made which of its writes
// is in the procedure's Runs.
//
//	go run ./examples/cluster
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/examples/provisionproc"
	"github.com/baton-dev/baton/procedure"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(w io.Writer) error {
	dir, err := os.MkdirTemp("", "baton-cluster-example")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The outside world is one, whichever master acts on it. Its
	// configuration step tells us when it starts, and waits for our word.
	configuring, proceed := make(chan string, 4), make(chan struct{})
	dc := provisionproc.NewDatacenter()
	dc.Configuring, dc.Proceed = configuring, proceed

	var peers []cluster.Peer
	for _, id := range []string{"n1", "n2", "n3"} {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		peers = append(peers, cluster.Peer{ID: id, Address: addr})
	}
	nodes := map[string]*cluster.Node{}
	defer func() {
		for _, n := range nodes {
			_ = n.Kill()
		}
	}()
	for _, p := range peers {
		reg := procedure.NewRegistry()
		if err := provisionproc.Register(reg); err != nil {
			return err
		}
		cfg := cluster.DefaultConfig()
		cfg.ID, cfg.RaftAddr, cfg.Peers = p.ID, p.Address, peers
		cfg.DataDir = filepath.Join(dir, p.ID)
		cfg.Registry, cfg.Env = reg, dc
		cfg.Logger = hclog.NewNullLogger()
		n, err := cluster.NewNode(cfg)
		if err != nil {
			return err
		}
		nodes[p.ID] = n
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader, x, err := leaderOf(ctx, nodes, "")
	if err != nil {
		return err
	}
	id, err := x.Submit(&provisionproc.Provision{Host: "web-1"}, procedure.SubmitOptions{Nonce: "provision-web-1"})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "submitted to the leader, %s\n", leader)
	host, err := next(ctx, configuring)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: configuring %s; killing %s\n", leader, host, leader)
	_ = nodes[leader].Kill()
	delete(nodes, leader)
	newLeader, x, err := leaderOf(ctx, nodes, leader)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "new leader elected")
	// The killed leader's configuration never finished: the new leader
	// runs that state again (which is why states are idempotent).
	close(proceed)
	if _, err := next(ctx, configuring); err != nil {
		return err
	}
	info, err := x.Wait(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "web-1: %s, hosts %s\n", info.State, dc.Snapshot())
	var ran []string
	for _, r := range info.Runs {
		who := "the killed leader"
		if r.Node == newLeader {
			who = "the new leader"
		}
		ran = append(ran, fmt.Sprintf("%s wrote %d-%d", who, r.First, r.Last))
	}
	fmt.Fprintln(w, "runs:", strings.Join(ran, ", "))
	return nil
}

// next is the next host the datacenter starts configuring.
func next(ctx context.Context, configuring <-chan string) (string, error) {
	select {
	case h := <-configuring:
		return h, nil
	case <-ctx.Done():
		return "", errors.New("no configuration started within the deadline")
	}
}

// leaderOf waits for a master other than not to lead with a running
// executor.
func leaderOf(ctx context.Context, nodes map[string]*cluster.Node, not string) (string, *procedure.Executor, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		for id, n := range nodes {
			if x, err := n.Executor(); err == nil && id != not {
				return id, x, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", nil, errors.New("no leader elected within the deadline")
		case <-t.C:
		}
	}
}

// freeAddr is a loopback address with a port free right now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
