package integration

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/integration/harness"
)

// slowReader is a TCP proxy between the CLI and one master that stands for
// a client reading slowly: it passes the master's first budget bytes to
// the client, then reads no more of them (the master's sends stall, as
// gRPC's flow control holds them to the client's pace) until release. The
// client's bytes to the master pass freely.
type slowReader struct {
	ln       net.Listener
	target   string
	budget   int64
	held     chan struct{} // closed once budget bytes reached the client
	released chan struct{} // closed by release
	heldOnce sync.Once
	relOnce  sync.Once
	wg       sync.WaitGroup
}

func newSlowReader(t *testing.T, target string, budget int64) *slowReader {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowReader{ln: ln, target: target, budget: budget, held: make(chan struct{}), released: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		p.release()
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *slowReader) Addr() string { return p.ln.Addr().String() }

// release lets the rest of the master's bytes through, as the client
// reads again.
func (p *slowReader) release() { p.relOnce.Do(func() { close(p.released) }) }

func (p *slowReader) accept() {
	defer p.wg.Done()
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			return
		}
		tc, err := net.Dial("tcp", p.target)
		if err != nil {
			cc.Close()
			continue
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(tc, cc)
			tc.(*net.TCPConn).CloseWrite()
		}()
		go func() {
			defer p.wg.Done()
			defer cc.Close()
			defer tc.Close()
			if n, err := io.CopyN(cc, tc, p.budget); err != nil || n < p.budget {
				return
			}
			p.heldOnce.Do(func() { close(p.held) })
			<-p.released
			_, _ = io.Copy(cc, tc)
		}()
	}
}

// TestSnapshotSaveLeaderKilled is docs/operations.md's "A leader change
// mid-transfer" with real processes: `baton snapshot save` streams from
// the leader through a slow reader, which holds the stream once its first
// chunks have reached the CLI; the leader is SIGKILLed there, and the
// reader lets the rest through. The save fails, exit 3, saying the stream
// broke, with no FILE and no temporary file left; the leader never
// finished the stream (its log has no "snapshot saved"). Run again, the
// save is served by the new leader, and the file inspects good with every
// region of the layout.
func TestSnapshotSaveLeaderKilled(t *testing.T) {
	const tables, regions = 5, 2000 // about 0.6 MB of state: many times the reader's budget
	ctx, c, leader := leadingCluster(t, 3, 4*time.Minute)
	c.StartRegionServers(3, harness.RSOptions{})
	if _, err := c.WaitRegionServers(ctx); err != nil {
		t.Fatal(err)
	}
	d := &drill{t: t, ctx: ctx, c: c, acked: map[uint64]string{}}
	var wg sync.WaitGroup
	errs := make(chan error, tables)
	for i := range tables {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- d.createTable(fmt.Sprintf("snap-%d", i), regions) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if l := c.WaitLeader(ctx); l != leader {
		leader = l
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "snap.baton")
	nothingLeft := func(what string) {
		t.Helper()
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Fatalf("%s: left in the directory: %v", what, names)
		}
	}

	// 128 KiB: the HTTP/2 preamble and the first 64 KiB chunks, so the
	// CLI holds the stream's first bytes and will not take the rest from
	// another master.
	slow := newSlowReader(t, c.Node(leader).GRPCAddr, 128<<10)
	type result struct {
		code           int
		stdout, stderr string
	}
	first := make(chan result, 1)
	go func() {
		code, stdout, stderr := runCLI(t, ctx, "snapshot", "save", file, "--addr", slow.Addr())
		first <- result{code, stdout, stderr}
	}()
	select {
	case <-slow.held:
	case r := <-first:
		t.Fatalf("the save ended before its stream was held: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	case <-ctx.Done():
		t.Fatal("the stream never reached the reader's budget")
	}
	killed := time.Now()
	c.Kill(leader)
	slow.release()
	var r result
	select {
	case r = <-first:
	case <-ctx.Done():
		t.Fatal("the save did not end after its leader was killed")
	}
	t.Logf("first save, %v after the kill: exit %d: %s", time.Since(killed).Round(time.Millisecond), r.code, strings.TrimSpace(r.stderr))
	expectExit(t, "snapshot save with its leader killed mid-stream", r.code, 3, r.stdout+r.stderr)
	if !strings.Contains(r.stderr, "the leader's stream broke after") || !strings.Contains(r.stderr, "run 'baton snapshot save' again") {
		t.Fatalf("stderr does not say the stream broke and what to do:\n%s", r.stderr)
	}
	if strings.Contains(c.CurrentLog(leader), "snapshot saved") {
		t.Fatalf("the leader finished streaming before it was killed: the test did not kill it mid-save (make the state larger)")
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("FILE after the failed save: %v", err)
	}
	nothingLeft("after the failed save")

	// Again, through any master: the new leader serves it.
	newLeader := c.WaitLeader(ctx)
	if newLeader == leader {
		t.Fatalf("leader %s again after it was killed", leader)
	}
	code, stdout, stderr := runCLI(t, ctx, "snapshot", "save", file, "--addr", strings.Join(c.AdminAddrs(), ","), "--json")
	expectExit(t, "snapshot save from the new leader", code, 0, stdout+stderr)
	var saved struct {
		ServedBy string `json:"served_by"`
		Regions  int    `json:"regions"`
	}
	decodeJSON(t, "snapshot save --json", stdout, &saved)
	if saved.ServedBy != newLeader || saved.Regions != tables*regions {
		t.Fatalf("saved %+v, want served by %s with %d regions", saved, newLeader, tables*regions)
	}
	// What the first leader's log lacks, the second's has: the check
	// above looks for the right line.
	if !strings.Contains(c.CurrentLog(newLeader), "snapshot saved") {
		t.Fatalf("the new leader's log has no \"snapshot saved\"")
	}
	if st, err := os.Stat(file); err == nil {
		t.Logf("second save: %d bytes from %s; the first was held at %d", st.Size(), newLeader, 128<<10)
	}
	code, stdout, stderr = runCLI(t, ctx, "snapshot", "inspect", file, "--json")
	expectExit(t, "snapshot inspect", code, 0, stdout+stderr)
	var inspected struct {
		Regions int `json:"regions"`
	}
	decodeJSON(t, "snapshot inspect --json", stdout, &inspected)
	if inspected.Regions != tables*regions {
		t.Fatalf("inspect: %d regions, want %d", inspected.Regions, tables*regions)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Fatalf("left behind by the good save: %v", left)
	}
}
