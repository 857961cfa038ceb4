package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// benchProfiler takes CPU profiles of every running master while a phase
// of `baton bench scale` runs (--profile DIR): where the time of a slow
// open or crash recovery goes is the question its figures raise, and the
// processes are gone once the bench ends. Each profile is fetched from the
// master's /debug/pprof/profile, so it costs the master what pprof costs
// (a few percent), and only while it runs.
type benchProfiler struct {
	dir     string
	seconds int
	wg      sync.WaitGroup
	mu      sync.Mutex
	errs    []error
}

// start profiles every running master for p.seconds in the background,
// into DIR/<regions>-<phase>-<master>.pprof. A nil profiler does nothing.
// The row waits for its profiles before it stops its cluster (a profile
// is sent only at its end), so a phase shorter than the profile costs the
// row the difference.
func (p *benchProfiler) start(ctx context.Context, c *benchCluster, row, phase string) {
	if p == nil {
		return
	}
	client := &http.Client{Transport: c.http.Transport} // no timeout: the request lasts the profile's length
	for _, m := range c.masters {
		if !m.Running() {
			continue
		}
		path := p.path(row, phase, m.id)
		url := fmt.Sprintf("%s://%s/debug/pprof/profile?seconds=%d", c.scheme, m.httpAddr, p.seconds)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := fetchProfile(ctx, client, url, path, time.Duration(p.seconds+30)*time.Second); err != nil {
				p.mu.Lock()
				p.errs = append(p.errs, fmt.Errorf("profile %s: %w", filepath.Base(path), err))
				p.mu.Unlock()
			}
		}()
	}
}

// heap writes every running master's heap profile, after a collection
// (gc=1: in-use figures are then the live heap), into
// DIR/<regions>-<phase>-heap-<master>.pprof. What a master holds per
// region is the question its RSS raises, and the processes are gone once
// the bench ends. A nil profiler does nothing.
func (p *benchProfiler) heap(ctx context.Context, c *benchCluster, row, phase string) []error {
	if p == nil {
		return nil
	}
	var errs []error
	for _, m := range c.masters {
		if !m.Running() {
			continue
		}
		path := p.path(row, phase+"-heap", m.id)
		url := fmt.Sprintf("%s://%s/debug/pprof/heap?gc=1", c.scheme, m.httpAddr)
		if err := fetchProfile(ctx, c.http, url, path, time.Minute); err != nil {
			errs = append(errs, fmt.Errorf("heap profile %s: %w", filepath.Base(path), err))
		}
	}
	return errs
}

// wait waits for the profiles in flight and returns what failed.
func (p *benchProfiler) wait() []error {
	if p == nil {
		return nil
	}
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := p.errs
	p.errs = nil
	return errs
}

func fetchProfile(ctx context.Context, client *http.Client, url, path string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path) // a cut-off profile does not parse
	}
	return err
}

// path is where master id's profile of a row's phase is written.
func (p *benchProfiler) path(row, phase, id string) string {
	return filepath.Join(p.dir, fmt.Sprintf("%s-%s-%s.pprof", row, phase, id))
}
