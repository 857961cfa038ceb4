package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/cluster/snapdir"
	"github.com/baton-dev/baton/internal/fsutil"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/raftfsm"
)

const snapshotUsage = `usage: baton snapshot <command> [flags]

commands:
  save FILE             write a snapshot of the cluster's state, read by the leader at a
                        linearizable point, to FILE (atomically: whole or not at all)
  save --dir DIR [--retain N]
                        the same into DIR as baton-<cluster id>-<UTC time>-<index>.snap
                        (never over another file), then keep only the newest N there
  inspect FILE [--json] check FILE's checksum and structure and print its header and
                        counts; needs no cluster (exit 1 if the file is bad)
  restore FILE --data-dir DIR --id ID --peers ID=RAFTADDR,... [--json]
                        build one member of a new cluster's data directory from FILE;
                        run it for every member with the same FILE and --peers, then start
                        the agents (exit 1 if FILE is bad or DIR holds anything)

save takes --addr (env BATON_ADDR), --json and --timeout; see docs/operations.md.
`

func init() {
	topLevel.add(topCommand{
		name: "snapshot", rank: 45, run: (*cli).snapshot,
		summary: `save FILE, inspect FILE, restore FILE`,
	})
}

func (c *cli) snapshot(args []string) int {
	return c.subcommands("snapshot", snapshotUsage, args, map[string]func([]string) int{
		"save":    c.snapshotSave,
		"inspect": c.snapshotInspect,
		"restore": c.snapshotRestore,
	})
}

// snapshotFileMode keeps a snapshot private: it holds the ACL's token
// hashes and the audit trail.
const snapshotFileMode = 0o600

// snapshotWriteHook, set by tests, wraps the writer of the file being
// saved (a disk that fills up).
var snapshotWriteHook func(io.Writer) io.Writer

// snapshotSaveJSON is save's --json document.
type snapshotSaveJSON struct {
	File   string `json:"file"`
	Bytes  int64  `json:"bytes"`
	TookMs int64  `json:"took_ms"`
	// Removed are the files --retain pruned (with --dir only).
	Removed *[]string `json:"removed,omitempty"`
	// RetainError says why pruning failed after a good save (exit 1).
	RetainError string `json:"retain_error,omitempty"`
	snapshotInspectJSON
}

func (c *cli) snapshotSave(args []string) int {
	e := c.command("snapshot save", "FILE | --dir DIR [--retain N]", nil)
	dir := e.fs.String("dir", "", "write into directory DIR (created 0700 if missing) under the name the leader's scheduled snapshots take, baton-<cluster id>-<UTC time>-<index>.snap, never over a file already there; instead of FILE")
	retain := e.fs.Int("retain", 0, "with --dir: then keep only the newest N files of that pattern in DIR, never the one just written (other files are left alone); absent keeps all")
	pos, err := parse(e.fs, args)
	if err != nil {
		return parseFailed(err)
	}
	retainSet := false
	e.fs.Visit(func(f *flag.Flag) { retainSet = retainSet || f.Name == "retain" })
	switch {
	case *dir != "" && len(pos) > 0:
		return e.fail(usagef("FILE (%q) and --dir are exclusive: give one", pos[0]))
	case *dir == "" && len(pos) != 1:
		return e.fail(usagef("want exactly one FILE, or --dir DIR, got %d arguments", len(pos)))
	case *dir == "" && strings.TrimSpace(pos[0]) == "":
		return e.fail(usagef("FILE is empty"))
	case retainSet && *dir == "":
		return e.fail(usagef("--retain prunes a --dir: give --dir DIR, or no --retain with FILE"))
	case retainSet && *retain < 1:
		return e.fail(usagef("--retain %d: want at least 1 (the file just written is always kept)", *retain))
	}
	target := *dir
	if target == "" {
		target = pos[0]
		if st, err := os.Stat(target); err == nil && st.IsDir() {
			return e.fail(usagef("%s is a directory: give the file to write, or --dir %s", target, target))
		}
	} else if st, err := os.Stat(target); err == nil && !st.IsDir() {
		return e.fail(usagef("--dir %s is not a directory", target))
	}
	// SIGINT ends c.ctx (run); SIGTERM is caught here too. Either ends the
	// transfer through ctx, so that the temporary file is removed before
	// the process exits instead of staying behind it.
	ctx, intr := c.interruptible()
	defer intr.stop()
	return e.withClient(func(cl *client.Client) int {
		start := time.Now()
		var n int64
		// fill writes the snapshot into f and verifies it there.
		fill := func(f *os.File) (snapshotSummary, error) {
			var w io.Writer = f
			if snapshotWriteHook != nil {
				w = snapshotWriteHook(w)
			}
			bw := bufio.NewWriterSize(w, 256<<10)
			var err error
			if n, err = cl.SnapshotSave(ctx, bw); err != nil {
				return snapshotSummary{}, err
			}
			if err := bw.Flush(); err != nil {
				return snapshotSummary{}, fmt.Errorf("writing %s: %w", target, err)
			}
			// What came over the network is judged before it is kept: a
			// stream cut short, or damaged, never becomes FILE.
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return snapshotSummary{}, fmt.Errorf("reading back %s: %w", target, err)
			}
			sum, err := summarizeSnapshot(ctxReader{ctx, f})
			if err != nil {
				if ctx.Err() != nil {
					return snapshotSummary{}, ctx.Err()
				}
				return snapshotSummary{}, fmt.Errorf("the snapshot received is bad, not kept: %w", err)
			}
			// A signal from here on lets the save finish: the file is whole
			// and verified, and only its rename is left.
			return sum, ctx.Err()
		}
		var sum snapshotSummary
		path := target
		if *dir == "" {
			err = fsutil.CreateAtomic(path, snapshotFileMode, func(f *os.File) (err error) {
				sum, err = fill(f)
				return err
			})
		} else if err = os.MkdirAll(target, fsutil.PrivateDirMode); err == nil {
			path, err = snapdir.Create(target, snapshotFileMode, func(f *os.File) (snapdir.Header, error) {
				var err error
				sum, err = fill(f)
				h := sum.header
				return snapdir.Header{ClusterID: h.ClusterID, At: time.UnixMilli(h.CreatedUnixMs), Index: h.Index}, err
			})
		}
		switch {
		case err == nil:
		case ctx.Err() != nil && (errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled):
			// Only a failure the signal caused: a disk error that came
			// with a signal is reported as itself (FILE may be replaced).
			return c.saveInterrupted(e, target, n, intr.signal())
		case n > 0 && status.Code(err) == codes.Unavailable:
			return c.saveBroken(e, target, n, err)
		default:
			return e.fail(err)
		}
		doc := snapshotSaveJSON{File: path, Bytes: n, TookMs: time.Since(start).Milliseconds(), snapshotInspectJSON: sum.json()}
		code := exitOK
		if *dir != "" {
			removed := []string{}
			if retainSet {
				var perr error
				removed, perr = snapdir.Prune(target, *retain, path)
				if removed == nil {
					removed = []string{}
				}
				if perr != nil {
					// The snapshot is good and kept; a failing retention
					// would fill the volume, so the run fails for someone
					// to see it.
					doc.RetainError = perr.Error()
					fmt.Fprintf(c.stderr, "baton %s: saved %s, but keeping the newest %d failed: %v\n", e.name, path, *retain, perr)
					code = exitFailed
				}
			}
			doc.Removed = &removed
		}
		if e.cf.json {
			c.printJSON(doc)
			return code
		}
		fmt.Fprintf(c.stdout, "saved %s: %d bytes in %v\n", path, n, time.Since(start).Round(time.Millisecond))
		sum.print(c.stdout)
		if doc.Removed != nil && len(*doc.Removed) > 0 {
			fmt.Fprintf(c.stdout, "retention    kept the newest %d, removed %s\n", *retain, strings.Join(*doc.Removed, ", "))
		}
		return code
	})
}

// saveInterrupted reports a save that SIGINT or SIGTERM (sig) ended:
// nothing was kept, and the exit code is the shell's for the signal (130,
// 143), as for a process it killed, though this one cleaned up first.
func (c *cli) saveInterrupted(e *command, path string, n int64, sig syscall.Signal) int {
	msg := fmt.Sprintf("interrupted by %s after %d bytes: %s left as it was, the temporary file removed", signalName(sig), n, path)
	fmt.Fprintf(c.stderr, "baton %s: %s\n", e.name, msg)
	code := 128 + int(sig)
	if e.cf.json {
		c.printJSON(map[string]any{"error": map[string]any{"code": "CANCELLED", "message": msg, "exit_code": code}})
	}
	return code
}

// saveBroken reports a stream that broke after its first bytes (err,
// UNAVAILABLE): the leader stopped or lost its leadership mid-transfer.
// The client does not take the rest from another master (the file would
// be two states' halves), so nothing is kept and running the command
// again saves from the leader there is now: exit 3, as for any answer a
// retry may mend.
func (c *cli) saveBroken(e *command, path string, n int64, err error) int {
	msg := fmt.Sprintf("the leader's stream broke after %d bytes (%s): %s left as it was, the temporary file removed",
		n, status.Convert(err).Message(), path)
	fmt.Fprintf(c.stderr, "baton %s: %s (UNAVAILABLE)\n  the leader stopped or changed mid-transfer: run 'baton snapshot save' again, which saves from the leader there is now\n", e.name, msg)
	if e.cf.json {
		c.printJSON(map[string]any{"error": map[string]any{"code": "UNAVAILABLE", "message": msg, "exit_code": exitUnavailable}})
	}
	return exitUnavailable
}

// ctxReader reads r until ctx ends: reading back a large file stops at a
// signal.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func (c *cli) snapshotInspect(args []string) int {
	fs, cf := c.newFlagSet("snapshot inspect", "FILE [--json]")
	pos, err := parse(fs, args)
	if err != nil {
		return parseFailed(err)
	}
	if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
		return c.finish("snapshot inspect", fs, cf, usagef("want exactly one FILE, got %d arguments", len(pos)))
	}
	f, err := os.Open(pos[0])
	if err != nil {
		return c.snapshotBad(cf, pos[0], err)
	}
	defer f.Close()
	sum, err := summarizeSnapshot(f)
	if err != nil {
		return c.snapshotBad(cf, pos[0], err)
	}
	if cf.json {
		c.printJSON(sum.json())
		return exitOK
	}
	fmt.Fprintf(c.stdout, "%s: good (checksum and structure verified)\n", pos[0])
	sum.print(c.stdout)
	return exitOK
}

// snapshotBad reports a file inspect refuses: exit 1.
func (c *cli) snapshotBad(cf *clientFlags, path string, err error) int {
	fmt.Fprintf(c.stderr, "baton snapshot inspect: %s: %v\n", path, err)
	if cf.json {
		c.printJSON(map[string]any{"error": map[string]any{"code": "BAD_SNAPSHOT", "message": err.Error(), "exit_code": exitFailed}})
	}
	return exitFailed
}

// snapshotSummary is what a verified snapshot file holds.
type snapshotSummary struct {
	header raftfsm.SnapshotFileHeader
	bytes  int64
	counts snapshotCounts
}

// snapshotCounts counts the state by kind: procedures by whether they
// finished, domain keys by their prefix (cluster/domain, cluster/access).
type snapshotCounts struct {
	ProceduresLive     uint64 `json:"procedures_live"`
	ProceduresFinished uint64 `json:"procedures_finished"`
	Namespaces         uint64 `json:"namespaces"`
	Tables             uint64 `json:"tables"`
	Regions            uint64 `json:"regions"`
	RegionServers      uint64 `json:"region_servers"`
	Locks              uint64 `json:"locks"`
	ACLEntries         uint64 `json:"acl_entries"`
	AuditRecords       uint64 `json:"audit_records"`
	AuditRefusals      uint64 `json:"audit_refusals"`
	Members            uint64 `json:"members"`
	OtherKeys          uint64 `json:"other_keys"`
}

// slot is the count key's kind goes to. The domain's prefixes are what
// its key functions put before a name.
func (k *snapshotCounts) slot(key string) *uint64 {
	switch {
	case strings.HasPrefix(key, domain.NamespaceKey("")):
		return &k.Namespaces
	case strings.HasPrefix(key, domain.TableKey("")):
		return &k.Tables
	case strings.HasPrefix(key, domain.RegionKey("")):
		return &k.Regions
	case strings.HasPrefix(key, domain.ServerKey("")):
		return &k.RegionServers
	case strings.HasPrefix(key, "lock/"): // domain.LockKey's prefix
		return &k.Locks
	case strings.HasPrefix(key, access.CertPrefix), strings.HasPrefix(key, access.TokenPrefix):
		return &k.ACLEntries
	case strings.HasPrefix(key, access.AuditPrefix):
		return &k.AuditRecords
	case strings.HasPrefix(key, access.RefusedPrefix):
		return &k.AuditRefusals
	case strings.HasPrefix(key, "nodes/") && strings.HasSuffix(key, strings.TrimPrefix(cluster.AdminAddrKey(""), "nodes/")):
		return &k.Members
	}
	return &k.OtherKeys
}

// keyCount is how many of what slot counts key holds, with value: a
// group of audit records counts each record it holds (none, if it does
// not decode, as every reader of the trail skips it).
func keyCount(key string, value []byte) uint64 {
	if s, ok := strings.CutPrefix(key, access.AuditPrefix); ok {
		return uint64(len(access.StoredRecords(s, value)))
	}
	return 1
}

// summarizeSnapshot reads a snapshot file through, verifying it, and
// counts what it holds.
func summarizeSnapshot(r io.Reader) (snapshotSummary, error) {
	cr := &countingReader{r: r}
	sr, err := raftfsm.OpenSnapshotFile(cr)
	if err != nil {
		return snapshotSummary{}, err
	}
	s := snapshotSummary{header: sr.Header()}
	for {
		e, err := sr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return snapshotSummary{}, err
		}
		if e.Proc != nil {
			sm, err := procedure.DecodeSummary(e.Proc.Data)
			switch {
			case err != nil:
				return snapshotSummary{}, fmt.Errorf("procedure %d: not a procedure record: %w", e.Proc.ID, err)
			case sm.State.Terminal():
				s.counts.ProceduresFinished++
			default:
				s.counts.ProceduresLive++
			}
			continue
		}
		*s.counts.slot(e.Key) += keyCount(e.Key, e.Value)
	}
	s.bytes = cr.n
	return s, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// snapshotInspectJSON is inspect's --json document (and part of save's).
type snapshotInspectJSON struct {
	FormatVersion int    `json:"format_version"`
	ClusterID     string `json:"cluster_id"`
	Index         uint64 `json:"index"`
	Term          uint64 `json:"term"`
	CreatedAt     string `json:"created_at"`
	TakenBy       string `json:"taken_by"`
	ServedBy      string `json:"served_by"`
	Version       string `json:"version"`
	ClusterFormat uint32 `json:"cluster_format"`
	FileBytes     int64  `json:"file_bytes"`
	Procedures    uint64 `json:"procedures"`
	Keys          uint64 `json:"keys"`
	MaxProcID     uint64 `json:"max_proc_id"`
	snapshotCounts
}

func (s snapshotSummary) json() snapshotInspectJSON {
	h := s.header
	return snapshotInspectJSON{
		FormatVersion: raftfsm.SnapshotFileVersion, ClusterID: h.ClusterID, Index: h.Index, Term: h.Term,
		CreatedAt: msTime(h.CreatedUnixMs), TakenBy: h.TakenBy, ServedBy: h.ServedBy, Version: h.Version,
		ClusterFormat: h.ClusterFormat, FileBytes: s.bytes, Procedures: h.Procs, Keys: h.Keys, MaxProcID: h.MaxProcID,
		snapshotCounts: s.counts,
	}
}

func (s snapshotSummary) print(w io.Writer) {
	h, k := s.header, s.counts
	id := h.ClusterID
	if id == "" {
		id = "(none yet: written once the cluster version is 2)"
	}
	fmt.Fprintf(w, "format       snapshot file version %d, %d bytes\n", raftfsm.SnapshotFileVersion, s.bytes)
	fmt.Fprintf(w, "cluster id   %s\n", id)
	fmt.Fprintf(w, "taken        %s by %s, served by %s (%s, cluster format %d)\n", msTime(h.CreatedUnixMs), h.TakenBy, h.ServedBy, h.Version, h.ClusterFormat)
	fmt.Fprintf(w, "raft         index %d, term %d\n", h.Index, h.Term)
	fmt.Fprintf(w, "procedures   %d live, %d finished (max id %d)\n", k.ProceduresLive, k.ProceduresFinished, h.MaxProcID)
	fmt.Fprintf(w, "catalog      %d namespaces, %d tables, %d regions, %d region servers, %d locks\n", k.Namespaces, k.Tables, k.Regions, k.RegionServers, k.Locks)
	fmt.Fprintf(w, "access       %d ACL entries, %d audit records, %d audit refusals\n", k.ACLEntries, k.AuditRecords, k.AuditRefusals)
	fmt.Fprintf(w, "other        %d members' addresses, %d other keys (%d keys in all)\n", k.Members, k.OtherKeys, h.Keys)
}
