package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
)

// The corruption tests damage files of a stopped follower, restart it, and
// check that it either refuses to start (non-zero exit, a message naming
// the file and where) or recovers by the documented rule (cluster package
// doc, Damaged files at start) to the same state as the other members.

// flipBytes inverts n bytes of path from offset off.
func flipBytes(t *testing.T, path string, off int64, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatalf("read %s@%d: %v", path, off, err)
	}
	for i := range b {
		b[i] ^= 0xff
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// expectRefusal waits for node id's process to exit, and fails t unless it
// exited non-zero with a log matching every pattern.
func expectRefusal(t *testing.T, ctx context.Context, c *harness.Cluster, id string, patterns ...string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	code, err := c.WaitExit(wctx, id)
	if err != nil {
		t.Fatalf("%s started on damaged files: %v (log: %s)", id, err, c.Node(id).LogPath)
	}
	log := c.CurrentLog(id)
	if code == 0 {
		t.Errorf("%s exited 0 on damaged files", id)
	}
	if strings.Contains(log, "panic:") {
		t.Errorf("%s panicked instead of refusing (log: %s)", id, c.Node(id).LogPath)
	}
	for _, p := range patterns {
		if !regexp.MustCompile(p).MatchString(log) {
			t.Errorf("%s's refusal does not match %q:\n%s", id, p, lastLines(log, 5))
		}
	}
	t.Logf("%s exited %d: %s", id, code, lastLines(log, 1))
}

// freelistPage returns the freelist page of the bbolt file img, as its
// newer meta page (the higher transaction id) names it. bbolt moves the
// freelist at every commit, so page 2, where a new file has it, may be a
// free page by now, whose damage goes unseen. A meta page is the 16-byte
// page header, then magic, version, page size, flags (4 bytes each), the
// root bucket (16), the freelist's page id (8), the high water mark (8) and
// the transaction id (8).
func freelistPage(img []byte, pageSize int) (int64, bool) {
	const freelistAt, txidAt = 16 + 16 + 16, 16 + 16 + 16 + 8 + 8
	le := func(b []byte) uint64 {
		var v uint64
		for i := 7; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		return v
	}
	var best, bestTx uint64
	for m := 0; m < 2; m++ {
		meta := img[m*pageSize:]
		if tx := le(meta[txidAt:]); m == 0 || tx > bestTx {
			best, bestTx = le(meta[freelistAt:]), tx
		}
	}
	if best < 2 || best >= uint64(len(img)/pageSize) {
		return 0, false // pgidNoFreelist (^0) when the freelist is not synced
	}
	return int64(best), true
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// expectSameState waits until every node applied the same index and
// holds the same effects, and that ids all ended SUCCESS.
func expectSameState(t *testing.T, ctx context.Context, c *harness.Cluster, cl *client.Client, ids map[string]uint64) {
	t.Helper()
	checkAllSucceeded(t, ctx, cl, ids)
	if _, err := c.Converge(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ref := sameDomains(t, domainOrSkip(t, ctx, c))
	for _, id := range ids {
		if _, ok := ref[fmt.Sprintf("effects/%d/0", id)]; !ok {
			t.Errorf("procedure %d has no effects key", id)
		}
	}
}

func merge(dst, src map[string]uint64) {
	for k, v := range src {
		dst[k] = v
	}
}

// settledFollower submits 20 procedures named after prefix, waits until
// they succeeded and every node applied them, and returns the cluster's
// client, what it acknowledged, and a follower: the node whose files the
// corruption tests damage.
func settledFollower(t *testing.T, ctx context.Context, c *harness.Cluster, prefix string) (*client.Client, map[string]uint64, string) {
	t.Helper()
	leader := c.WaitLeader(ctx)
	cl := c.Client()
	acked := submitAll(t, ctx, cl, prefix, 20)
	checkAllSucceeded(t, ctx, cl, acked)
	if _, err := c.Converge(ctx, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	return cl, acked, c.Followers(leader)[0]
}

// TestCorruptRaftDBRefusesStart damages a stopped follower's raft.db:
// first a page in the middle of the file, then both meta pages. Each
// time the node must refuse to start (bbolt's own reaction to some of this
// is a panic), naming the file and, for the page, its number; the others
// go on. With its data directory removed it rejoins and catches up.
func TestCorruptRaftDBRefusesStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newCluster(t, 3)
	cl, acked, f := settledFollower(t, ctx, c, "before")
	db := filepath.Join(c.Node(f).DataDir, "raft", "raft.db")
	c.Kill(f)
	orig, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	if len(orig) < 8*page {
		t.Fatalf("raft.db is only %d bytes", len(orig))
	}

	// The root page of the log bucket, then the freelist page: the meta
	// pages are fine, what they point to is not. (bbolt has no checksums
	// on other pages: damage inside a free page, or in the values of a
	// leaf, goes unseen; see the cluster package doc.)
	db0, err := bbolt.Open(db, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var logsRoot int64
	err = db0.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("logs"))
		if b == nil {
			return fmt.Errorf("no logs bucket in %s", db)
		}
		logsRoot = int64(b.Root())
		return nil
	})
	db0.Close()
	if err != nil {
		t.Fatal(err)
	}
	pages := []int64{logsRoot}
	if fl, ok := freelistPage(orig, page); ok {
		pages = append(pages, fl)
	} else {
		t.Logf("the newest meta page names no freelist page (not synced): only the log bucket's root is damaged")
	}
	for _, pg := range pages {
		if err := os.WriteFile(db, orig, 0o600); err != nil {
			t.Fatal(err)
		}
		flipBytes(t, db, pg*page, 16) // the page header: id, flags, count
		c.Restart(f)
		expectRefusal(t, ctx, c, f, `raft\.db`, `damaged file`, `(page|index) \d+`)
	}

	// Both meta pages: bbolt itself would panic on first use.
	if err := os.WriteFile(db, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	flipBytes(t, db, 16, 32)
	flipBytes(t, db, page+16, 32)
	c.Restart(f)
	expectRefusal(t, ctx, c, f, `raft\.db`, `damaged file`)

	// The cluster goes on without it, and the node, its data removed,
	// catches up (it bootstraps nothing: the others have state; the
	// leader still knows it as a member).
	merge(acked, submitAll(t, ctx, cl, "without", 10))
	if err := os.RemoveAll(c.Node(f).DataDir); err != nil {
		t.Fatal(err)
	}
	c.Restart(f)
	expectSameState(t, ctx, c, cl, acked)
}

// TestCorruptWALSegment damages a stopped follower's local WAL. In an
// older segment a flipped byte is damage that cannot be explained by a
// crash: the node refuses to start, naming the segment and the offset;
// with fsm/ moved aside it rebuilds its state from Raft. In the newest
// segment, written without an fsync per record, damage is a torn tail:
// it is cut at the last good record and Raft replays the rest.
func TestCorruptWALSegment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newCluster(t, 3)
	cl, acked, f := settledFollower(t, ctx, c, "first")
	fsmDir := filepath.Join(c.Node(f).DataDir, "fsm")
	// A restart opens a new segment: the first one becomes an older one.
	c.Kill(f)
	c.Restart(f)
	merge(acked, submitAll(t, ctx, cl, "second", 20))
	expectSameState(t, ctx, c, cl, acked)
	c.Kill(f)
	segs, _ := filepath.Glob(filepath.Join(fsmDir, "wal-*", "pv2-*.log"))
	if len(segs) < 2 {
		t.Fatalf("want at least 2 WAL segments in %s, have %v", fsmDir, segs)
	}
	oldest, newest := segs[0], segs[len(segs)-1]

	st, err := os.Stat(oldest)
	if err != nil {
		t.Fatal(err)
	}
	flipBytes(t, oldest, st.Size()/3, 1)
	c.Restart(f)
	expectRefusal(t, ctx, c, f, `local WAL damaged`, regexp.QuoteMeta(filepath.Base(oldest))+`@\d+`)

	// Documented recovery: move fsm/ aside; raft rebuilds it.
	if err := os.Rename(fsmDir, fsmDir+".damaged"); err != nil {
		t.Fatal(err)
	}
	c.Restart(f)
	merge(acked, submitAll(t, ctx, cl, "third", 10))
	expectSameState(t, ctx, c, cl, acked)

	// Torn tail in the newest segment: truncate it in the middle.
	c.Kill(f)
	segs, _ = filepath.Glob(filepath.Join(fsmDir, "wal-*", "pv2-*.log"))
	newest = segs[len(segs)-1]
	if st, err = os.Stat(newest); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(newest, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	c.Restart(f)
	merge(acked, submitAll(t, ctx, cl, "fourth", 10))
	expectSameState(t, ctx, c, cl, acked)
	if log := c.CurrentLog(f); !strings.Contains(log, "truncating torn tail") {
		t.Errorf("%s's log does not say it truncated the torn tail (log: %s)", f, c.Node(f).LogPath)
	}
}
