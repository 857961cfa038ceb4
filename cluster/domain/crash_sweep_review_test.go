package domain

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// sweepViaGet is ServerCrash.sweep as it was before it decoded the
// scanned value: each region found by the scan read again by getRegion.
func (p *ServerCrash) sweepViaGet(r reader, n int) (wave []crashedRegion, cursor string, swept bool, err error) {
	var tables []string
	if err := r.scan(tablePrefix, func(k string, _ []byte) bool {
		tables = append(tables, strings.TrimPrefix(k, tablePrefix))
		return true
	}); err != nil {
		return nil, "", false, err
	}
	cursor = p.Cursor
	var derr error
	for _, full := range tables {
		first := full + ","
		if p.Cursor != "" && first < p.Cursor && !strings.HasPrefix(p.Cursor, first) {
			continue
		}
		err := r.scan(regionPrefix+first, func(k string, _ []byte) bool {
			name := strings.TrimPrefix(k, regionPrefix)
			if name <= p.Cursor {
				return true
			}
			rg, ok, err := getRegion(r, name)
			if err != nil {
				derr = err
				return false
			}
			if ok && rg.onServer(p.Server) {
				wave = append(wave, crashedRegion{name, rg.Table})
				cursor = name
			}
			return len(wave) < n
		})
		if err == nil {
			err = derr
		}
		if err != nil {
			return nil, "", false, err
		}
		if len(wave) == n {
			return wave, cursor, false, nil
		}
	}
	return wave, cursor, true, nil
}

// TestCrashSweepScannedValue: over region records in both encodings
// (legacy JSON, binary with and without an explicit table, a table that
// is not the name's prefix), on the incarnation, on another one and on
// another server, in every region state, the sweep's waves, cursors and
// end are those the getRegion sweep gave, wave after wave, for several
// wave sizes; a damaged record fails both alike.
func TestCrashSweepScannedValue(t *testing.T) {
	ref := ServerRef{ID: "rs1", StartCode: 7}
	kv := map[string][]byte{}
	tables := []string{"ns:a", "ns:a2", "ns:b", "other:c"}
	states := []string{RegionOpen, RegionOpening, RegionClosing, RegionClosed, RegionOffline, RegionFailedOpen}
	for ti, tb := range tables {
		kv[TableKey(tb)] = mustJSON(Table{})
		for i := range 23 {
			name := fmt.Sprintf("%s,%05d,%d", tb, i, ti)
			rg := Region{Table: tb, State: states[(i+ti)%len(states)], Server: "rs1", StartCode: 7, ProcID: uint64(i)}
			switch i % 5 {
			case 1:
				rg.StartCode = 6 // an earlier incarnation
			case 2:
				rg.Server = "rs2"
			case 3:
				rg.Table = "moved:x" // stored with the table (binary flag, or JSON)
			}
			if i%2 == 0 {
				kv[RegionKey(name)] = mustJSON(rg) // as 0.1.0 wrote it
			} else {
				kv[RegionKey(name)] = encodeRegion(name, rg)
			}
		}
	}
	// A region whose table record is gone: the sweep never sees it.
	kv[RegionKey("gone:t,00000,1")] = encodeRegion("gone:t,00000,1", Region{Table: "gone:t", State: RegionOpen, Server: "rs1", StartCode: 7})
	r := mapReader(kv)
	for _, n := range []int{1, 2, 3, 7, 100} {
		a, b := &ServerCrash{Server: ref}, &ServerCrash{Server: ref}
		total := 0
		for step := 0; ; step++ {
			w1, c1, s1, e1 := a.sweep(r, n)
			w2, c2, s2, e2 := b.sweepViaGet(r, n)
			if e1 != nil || e2 != nil {
				t.Fatalf("n=%d step %d: errors %v, %v", n, step, e1, e2)
			}
			if !slices.Equal(w1, w2) || c1 != c2 || s1 != s2 {
				t.Fatalf("n=%d step %d: wave %v cursor %q swept %v; getRegion's %v %q %v", n, step, w1, c1, s1, w2, c2, s2)
			}
			total += len(w1)
			a.Cursor, a.Swept, b.Cursor, b.Swept = c1, s1, c2, s2
			if s1 {
				break
			}
		}
		if total == 0 {
			t.Fatalf("n=%d: nothing swept", n)
		}
	}
	// Damaged records: an unknown format, a cut binary record, bad JSON.
	for _, v := range [][]byte{{9, 1, 0}, {1}, []byte("{"), {}} {
		bad := map[string][]byte{TableKey("ns:a"): mustJSON(Table{}), RegionKey("ns:a,00000,0"): v}
		_, _, _, e1 := (&ServerCrash{Server: ref}).sweep(mapReader(bad), 5)
		_, _, _, e2 := (&ServerCrash{Server: ref}).sweepViaGet(mapReader(bad), 5)
		if (e1 == nil) != (e2 == nil) || e1 != nil && e1.Error() != e2.Error() {
			t.Errorf("record % x: sweep error %v, getRegion's %v", v, e1, e2)
		}
	}
}
