package store

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mergedFixtureEnv names the directory TestWriteMergedWALFixture writes to.
const mergedFixtureEnv = "BATON_MERGED_WAL_FIXTURE"

// TestWriteMergedWALFixture writes, when BATON_MERGED_WAL_FIXTURE names a
// directory, a WAL shaped by merges (segment ids with gaps, merged files
// carrying images and deletes) to its segments/ and the state it holds to
// want.json: internal/compat/testdata/release_tests/store/testdata/
// merged-wal is its output, which a release's own loader must read to that
// state (release_tests.sh).
func TestWriteMergedWALFixture(t *testing.T) {
	out := os.Getenv(mergedFixtureEnv)
	if out == "" {
		t.Skip(mergedFixtureEnv + " not set")
	}
	segDir := filepath.Join(out, "segments")
	if err := os.MkdirAll(segDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(segDir)
	cfg.SegmentSize, cfg.MaxSegments = 2<<10, 64
	w, _, _ := openLoaded(t, cfg)
	want := map[uint64]string{}
	app := func(b Batch) {
		mustAppend(t, w, b)
		waitNoRewrite(t, w)
	}
	next := uint64(1000)
	churn := func(n int) {
		for range n {
			app(Batch{Inserts: []Proc{p(next, fmt.Sprintf("short-%d-%s", next, strings.Repeat("s", 80)))}})
			app(Batch{Deletes: []uint64{next}})
			next++
		}
	}
	// Dense segments of old images (eight, so that they are not merged to
	// keep the segments within twice the live bytes), ten of them deleted
	// among short-lived ones: the run holding the deletes is merged, the
	// first segment (two thirds live) is not, so the merged file must carry
	// the deletes; id 5 is put again after its delete.
	for id := uint64(1); id <= 250; id++ {
		want[id] = fmt.Sprintf("old-%d-%s", id, strings.Repeat("o", 40))
		app(Batch{Inserts: []Proc{p(id, want[id])}})
	}
	churn(20)
	for id := uint64(1); id <= 10; id++ {
		delete(want, id)
		app(Batch{Deletes: []uint64{id}})
		churn(2)
	}
	want[5] = "again-5"
	app(Batch{Updates: []Proc{p(5, want[5])}})
	churn(60)
	waitNoRewrite(t, w)
	st := w.Stats()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st.StragglersRewritten == 0 || st.SegmentsDeleted == 0 {
		t.Fatalf("no merge: %+v", st)
	}
	if !carriesOlderDeletes(t, segDir) {
		t.Fatal("no merged segment carries deletes of images an older segment holds")
	}
	got, _ := loadDir(t, cfg)
	equalMaps(t, got, want)
	j, err := json.MarshalIndent(want, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "want.json"), j, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d segments, %+v", len(segFiles(t, segDir)), st)
}

// carriesOlderDeletes reports whether a segment of dir written by a merge
// (it holds REWRITE records) deletes ids an older segment holds images of.
func carriesOlderDeletes(t *testing.T, dir string) bool {
	older := map[uint64]bool{}
	for _, f := range segFiles(t, dir) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		merged, found := false, false
		var puts []uint64
		scanSegment(data, func(_ int64, typ recType, _ uint64, pl []byte) error {
			merged = merged || typ == recRewrite
			forEachOp(pl, func(id uint64, _ []byte) { puts = append(puts, id) }, func(id uint64) { found = found || older[id] })
			return nil
		})
		if merged && found {
			return true
		}
		for _, id := range puts {
			older[id] = true
		}
	}
	return false
}
