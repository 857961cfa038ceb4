package domain

import (
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/clock"
)

// blockingReader holds every region scan until release is closed, having
// told entered; its store holds the regions of onRS1, opening on rs1.
type blockingReader struct {
	entered chan struct{}
	release chan struct{}
	onRS1   []string
}

func (r blockingReader) get(string) ([]byte, bool, error) { return nil, false, nil }
func (r blockingReader) scan(_ string, fn func(string, []byte) bool) error {
	r.entered <- struct{}{}
	<-r.release
	for _, name := range r.onRS1 {
		if !fn(RegionKey(name), encodeRegion(name, Region{Table: "default:t", State: RegionOpening, Server: "rs1"})) {
			break
		}
	}
	return nil
}

// TestPicksDuringALoadScanAreKept: picks made while a refresh of the load
// counts scans the region records (which do not show them yet) are still
// counted once the scan's counts are installed, so the picks after it
// spread evenly instead of going again to the servers already chosen.
func TestPicksDuringALoadScanAreKept(t *testing.T) {
	clk := clock.NewManual(time.Unix(1e6, 0))
	s := &services{d: &Domain{cfg: Config{Clock: clk}}}
	cands := map[string]Server{"rs1": {}, "rs2": {}, "rs3": {}}
	free := blockingReader{entered: make(chan struct{}, 1), release: make(chan struct{})}
	close(free.release)
	// First counts: none anywhere.
	if _, err := s.pick(free, cands, ""); err != nil {
		t.Fatal(err)
	}
	<-free.entered
	// The counts go stale; the next pick starts a scan that waits. The
	// first pick's region has committed, on rs1: the scan sees it.
	clk.Advance(time.Minute)
	slow := blockingReader{entered: make(chan struct{}, 1), release: make(chan struct{}), onRS1: []string{"default:t,,1"}}
	done := make(chan error, 1)
	go func() {
		_, err := s.pick(slow, cands, "")
		done <- err
	}()
	<-slow.entered
	// Picked while the scan runs, from the counts there are.
	for range 4 {
		if _, err := s.pick(slow, cands, ""); err != nil {
			t.Fatal(err)
		}
	}
	close(slow.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// 6 picks so far; 3 more make 9, three a server.
	for range 3 {
		if _, err := s.pick(slow, cands, ""); err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range cands {
		if s.load[id] != 3 {
			t.Fatalf("load %v after 9 picks among 3 servers, want 3 each", s.load)
		}
	}
}
