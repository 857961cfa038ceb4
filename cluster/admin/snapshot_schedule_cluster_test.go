package admin_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/raftfsm"
)

// In a cluster of three whose masters all schedule snapshots, only the
// leader writes one; the file reads back whole with the reader `snapshot
// inspect` and a restore use, holding the procedures and regions the
// cluster has; /status, the metrics and the console's overview show it.
func TestScheduledSnapshotOnTheLeader(t *testing.T) {
	clk := clock.NewManual(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	root := t.TempDir()
	dirOf := func(i int) string { return filepath.Join(root, fmt.Sprintf("m%d", i)) }
	c := clustertest.New(t, clustertest.Config{SteadyLeader: true, HTTP: true, Admin: func(i int, cfg *admin.Config) {
		cfg.Snapshots = &admin.SnapshotSchedule{Interval: time.Hour, Dir: dirOf(i), Retain: 2, Clock: clk}
	}})
	li, _ := c.WaitLeader()
	const regions = 40
	c.SeedTable("default:t1", domain.TableEnabled, regions, 7, func(i int) domain.Region {
		return domain.Region{State: domain.RegionOpen, Server: "rs-1.baton.internal:16020", StartCode: 1732500000000, ProcID: 7}
	})
	var ids []uint64
	for range 3 {
		ids = append(ids, c.Submit(&diag.Sleep{Steps: 1}, ""))
	}
	for _, id := range ids {
		c.Wait(id, 30*time.Second)
	}

	clk.Advance(time.Second) // every master's first tick: the leader writes
	var file string
	for i := range 3 {
		es, err := os.ReadDir(dirOf(i))
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i == li && len(es) == 1:
			file = filepath.Join(dirOf(i), es[0].Name())
		case i == li:
			t.Fatalf("the leader m%d wrote %d files, want 1", i, len(es))
		case len(es) != 0:
			t.Fatalf("standby %d wrote %v", i, es[0].Name())
		}
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sr, err := raftfsm.OpenSnapshotFile(f)
	if err != nil {
		t.Fatal(err)
	}
	procs, regionKeys, keys := map[uint64]bool{}, 0, uint64(0)
	for {
		e, err := sr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if e.Proc != nil {
			procs[e.Proc.ID] = true
			continue
		}
		keys++
		if strings.HasPrefix(e.Key, domain.RegionKey("")) {
			regionKeys++
		}
	}
	h := sr.Header()
	for _, id := range ids {
		if !procs[id] {
			t.Errorf("procedure %d is not in the snapshot", id)
		}
	}
	if regionKeys != regions || uint64(len(procs)) != h.Procs || keys != h.Keys {
		t.Errorf("read %d regions, %d procedures, %d keys; want %d regions, and the header's %d procedures and %d keys", regionKeys, len(procs), keys, regions, h.Procs, h.Keys)
	}
	lead := c.Master(li)
	if h.ServedBy != lead.ID || h.TakenBy != "master/"+lead.ID || h.ClusterID == "" || !strings.Contains(filepath.Base(file), h.ClusterID) ||
		!strings.HasSuffix(file, fmt.Sprintf("-%d.snap", h.Index)) {
		t.Errorf("file %s, header %+v", file, h)
	}

	resp, err := http.Get("http://" + lead.HTTPAddr() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		LastSnapshot *struct {
			File  string `json:"file"`
			Index uint64 `json:"index"`
			Bytes int64  `json:"bytes"`
		} `json:"last_snapshot"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	size, _ := f.Seek(0, io.SeekEnd)
	if err != nil || st.LastSnapshot == nil || st.LastSnapshot.File != file || st.LastSnapshot.Index != h.Index || st.LastSnapshot.Bytes != size {
		t.Fatalf("/status last_snapshot %+v (%v); want %s, index %d, %d bytes", st.LastSnapshot, err, file, h.Index, size)
	}
	if n, err := testutil.GatherAndCount(lead.Metrics(), "baton_snapshot_last_success_index"); err != nil || n != 1 {
		t.Errorf("baton_snapshot_last_success_index: %d series, %v", n, err)
	}
	standby := c.Master((li + 1) % 3)
	c.WaitForNil("the snapshot on a standby's overview", func() error {
		resp, err := http.Get("http://" + standby.HTTPAddr() + "/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		want := fmt.Sprintf("index %d", h.Index)
		if !strings.Contains(string(body), `id="last-snapshot"`) || !strings.Contains(string(body), want) || !strings.Contains(string(body), "on "+lead.ID) {
			return fmt.Errorf("the overview lacks the last snapshot (%s on %s)", want, lead.ID)
		}
		return nil
	})
}
