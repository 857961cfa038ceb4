package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/raftfsm"
)

// snapshotRestoreJSON is restore's --json document.
type snapshotRestoreJSON struct {
	File         string `json:"file"`
	DataDir      string `json:"data_dir"`
	ID           string `json:"id"`
	Peers        string `json:"peers"`
	Index        uint64 `json:"index"`
	Term         uint64 `json:"term"`
	Procedures   uint64 `json:"procedures"`
	Keys         uint64 `json:"keys"`
	DroppedKeys  uint64 `json:"dropped_keys"`
	RestoredFrom string `json:"restored_from"`
	Snapshot     string `json:"snapshot"`
}

// snapshotRestore builds one new member's data directory from a snapshot
// file (cluster.RestoreDataDir). It needs no cluster. --id, --data-dir and
// --peers are named and read as the agent's, so the same values serve
// both; unlike the agent's they are not taken from the environment: a
// restore is run by hand, once per member, and a stray BATON_DATA_DIR
// must not pick its target.
func (c *cli) snapshotRestore(args []string) int {
	const name = "snapshot restore"
	fs := flag.NewFlagSet("baton "+name, flag.ContinueOnError)
	newUsageOut(fs, c.stdout, c.stderr)
	id := fs.String("id", "", "the new member's id, as its agent's --id; one of --peers")
	dataDir := fs.String("data-dir", "", "the new member's data directory, as its agent's --data-dir: absent or empty")
	peers := fs.String("peers", "", "the new cluster's members id=raft-host:port,..., as the agents' --peers: the same for every member restored")
	asJSON := fs.Bool("json", false, "print exactly one JSON document on stdout")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: baton %s FILE --data-dir DIR --id ID --peers ID=RAFTADDR,... [--json]\n\nflags:\n", name)
		fs.PrintDefaults()
	}
	pos, err := parse(fs, args)
	if err != nil {
		return parseFailed(err)
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(c.stderr, "baton %s: %s\nrun 'baton %s -h' for usage\n", name, fmt.Sprintf(format, a...), name)
		return exitUsage
	}
	if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
		return usage("want exactly one FILE, got %d arguments", len(pos))
	}
	switch {
	case *dataDir == "":
		return usage("--data-dir is required")
	case *id == "":
		return usage("--id is required")
	case *peers == "":
		return usage("--peers is required: the new cluster's members, every one a voter")
	}
	ps, err := cluster.ParsePeers(*peers)
	if err != nil {
		return usage("--peers: %s", strings.TrimPrefix(err.Error(), "cluster: peers: "))
	}
	if !peersList(ps, *id) {
		return usage("--peers does not list --id %s: give the same list to every member, this one included", *id)
	}
	res, err := cluster.RestoreDataDir(cluster.RestoreConfig{File: pos[0], DataDir: *dataDir, ID: *id, Peers: ps})
	if err != nil {
		code := "RESTORE_FAILED"
		switch {
		case errors.Is(err, raftfsm.ErrBadSnapshotFile):
			code = "BAD_SNAPSHOT"
		case errors.Is(err, cluster.ErrDataDirNotEmpty):
			code = "DATA_DIR_NOT_EMPTY"
		}
		fmt.Fprintf(c.stderr, "baton %s: %v\n  nothing was written to %s\n", name, err, *dataDir)
		if *asJSON {
			c.printJSON(map[string]any{"error": map[string]any{"code": code, "message": err.Error(), "exit_code": exitFailed}})
		}
		return exitFailed
	}
	if *asJSON {
		c.printJSON(snapshotRestoreJSON{File: pos[0], DataDir: res.DataDir, ID: res.ID, Peers: cluster.FormatPeers(res.Peers),
			Index: res.Index, Term: res.Term, Procedures: res.Procs, Keys: res.Keys, DroppedKeys: res.DroppedKeys,
			RestoredFrom: res.RestoredFrom, Snapshot: res.SnapshotID})
		return exitOK
	}
	from := res.RestoredFrom
	if from == "" {
		from = "(none)"
	}
	fmt.Fprintf(c.stdout, "restored %s into %s for member %s\n", pos[0], res.DataDir, res.ID)
	fmt.Fprintf(c.stdout, "  raft       snapshot %s at index %d, term %d; members %s, all voters\n", res.SnapshotID, res.Index, res.Term, cluster.FormatPeers(res.Peers))
	fmt.Fprintf(c.stdout, "  state      %d procedures, %d keys (%d left out: the old cluster id and members' records)\n", res.Procs, res.Keys, res.DroppedKeys)
	fmt.Fprintf(c.stdout, "  cluster id the old one was %s; the new cluster's first leader writes a new one\n", from)
	fmt.Fprintf(c.stdout, "then: restore every other member of --peers the same way, and start each agent with its --id, --data-dir and --raft-addr\n")
	return exitOK
}

func peersList(ps []cluster.Peer, id string) bool {
	for _, p := range ps {
		if p.ID == id {
			return true
		}
	}
	return false
}
