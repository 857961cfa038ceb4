package compat_test

import (
	"bytes"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/baton-dev/baton/cluster/diag"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/proto/raftpb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// TestGoldenSnapshot restores the release's Raft snapshot into the
// current FSM: its procedures are those the release listed, its keys
// decode into the current domain and access types, and a snapshot the
// current code takes of it restores to the same state.
func TestGoldenSnapshot(t *testing.T) {
	eachRelease(t, func(t *testing.T, g *golden) {
		var meta struct {
			Index, Term uint64
			Size        int
		}
		readJSON(t, g.path("snapshot", "meta.json"), &meta)
		data, err := os.ReadFile(g.path("snapshot", "state.bin"))
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != meta.Size || meta.Index == 0 {
			t.Fatalf("%s: snapshot of %d bytes, meta says %d at index %d", g.version, len(data), meta.Size, meta.Index)
		}
		f := restore(t, g.version, data)
		if f.AppliedIndex() != meta.Index {
			t.Errorf("%s: restored at index %d, the snapshot is of %d", g.version, f.AppliedIndex(), meta.Index)
		}

		var list struct {
			Procedures []listedProc `json:"procedures"`
		}
		readJSON(t, g.path("snapshot", "procs.json"), &list)
		var rl roles
		readJSON(t, g.path("snapshot", "roles.json"), &rl)
		infos, err := procedure.StoredInfos(f.Procs)
		if err != nil {
			t.Fatal(err)
		}
		// The filler ran while the snapshot was taken, and the mid-way
		// sleep came after it; everything else stood still.
		checkProcs(t, g.version, infos, list.Procedures, rl.SnapshotFiller, rl.SleepMidway)
		var filler *procedure.Info
		for i := range infos {
			if infos[i].ID == rl.SnapshotFiller {
				filler = &infos[i]
			}
		}
		if filler == nil || filler.Type != diag.TypeSleep || rl.SnapshotFiller == 0 {
			t.Errorf("%s: the snapshot's filler %d read as %+v", g.version, rl.SnapshotFiller, filler)
		}

		s := readDomain(t, g.version, f.Scan)
		if tb := s.tables["ns1:done"]; tb.State != domain.TableEnabled || tb.RegionCount != 3 {
			t.Errorf("%s: table ns1:done read as %+v", g.version, tb)
		}
		if tb := s.tables["ns1:pending"]; tb.State != domain.TableCreating || tb.RegionCount != 4 || tb.ProcID != rl.PendingTableCreate {
			t.Errorf("%s: table ns1:pending read as %+v", g.version, tb)
		}
		open := map[string]int{}
		for _, rg := range s.regions {
			open[rg.Table+" "+rg.State]++
		}
		if len(s.regions) != 7 || open["ns1:done OPEN"] != 3 || open["ns1:pending OPEN"]+open["ns1:pending OPENING"] != 4 {
			t.Errorf("%s: regions read %v", g.version, open)
		}
		if len(s.servers) != 2 || s.servers["rs1"].State != domain.ServerLive || s.servers["rs2"].State != domain.ServerLive {
			t.Errorf("%s: region servers read %+v", g.version, s.servers)
		}
		if lk, ok := s.locks[rl.HeldLock]; !ok || len(s.locks) != 1 || lk.Description != "golden-held" {
			t.Errorf("%s: locks read %+v", g.version, s.locks)
		}
		if len(s.bindings) != 2 || s.bindings["alice"].GetPermission() != "read" || s.bindings["ops"].GetPermission() != "admin" {
			t.Errorf("%s: bindings read %v", g.version, s.bindings)
		}
		var names []string
		for _, tk := range s.tokens {
			names = append(names, tk.Name+"="+tk.Permission)
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"bootstrap=admin", "ci=operate"}) || s.boot == nil || s.tokens[s.boot.Accessor] == nil {
			t.Errorf("%s: tokens read %v, bootstrap record %+v", g.version, names, s.boot)
		}
		var methods []string
		for _, a := range s.audit {
			methods = append(methods, a.Method)
		}
		// golden.sh's calls up to the snapshot, in order.
		want := []string{"AclGrant", "AclGrant", "AclRevoke", "AclCreateToken", "AclCreateToken", "AclDeleteToken",
			"CreateNamespace", "CreateNamespace", "DeleteNamespace", "CreateTable", "DisableTable", "EnableTable",
			"SubmitProcedure", "SubmitProcedure", "SubmitProcedure", "CreateTable", "AcquireLock", "AcquireLock", "SubmitProcedure"}
		if !slices.Equal(methods, want) {
			t.Errorf("%s: audit records of %v, want %v", g.version, methods, want)
		}

		// The current code's snapshot of the restored state restores to
		// the same state.
		again := restore(t, g.version, snapshotOf(t, f))
		if !sameState(t, f, again) {
			t.Errorf("%s: the current code's snapshot of the restored state restores differently", g.version)
		}
	})
}

// restore is a new FSM restored from snapshot data.
func restore(t *testing.T, version string, data []byte) *raftfsm.FSM {
	t.Helper()
	f, err := raftfsm.NewFSM(raftfsm.Config{Dir: t.TempDir(), WAL: store.WALConfig{NoSync: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatalf("%s: the current FSM refuses the snapshot: %v", version, err)
	}
	return f
}

// snapshotOf is the bytes of a snapshot of f.
func snapshotOf(t *testing.T, f *raftfsm.FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	return sink.Bytes()
}

type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

// sameState reports whether a and b hold the same procedures and keys.
func sameState(t *testing.T, a, b *raftfsm.FSM) bool {
	t.Helper()
	dump := func(f *raftfsm.FSM) (map[uint64]string, map[string]string) {
		procs, kv := map[uint64]string{}, map[string]string{}
		if err := f.Procs(func(p store.Proc) error { procs[p.ID] = string(p.Data); return nil }); err != nil {
			t.Fatal(err)
		}
		f.Scan("", func(k string, v []byte) bool { kv[k] = string(v); return true })
		return procs, kv
	}
	pa, ka := dump(a)
	pb, kb := dump(b)
	return len(pa) > 0 && len(ka) > 0 && maps.Equal(pa, pb) && maps.Equal(ka, kb)
}

// TestGoldenRaftLog reads every entry of the release's raft.db: each
// command is the framing the current code knows around an envelope and a
// batch with no field it does not know, and replaying them all into a
// current FSM gives the state the release's local WAL holds.
func TestGoldenRaftLog(t *testing.T) {
	eachRelease(t, func(t *testing.T, g *golden) {
		bs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(copyDir(t, g.path("datadir", "raft")), "raft.db")})
		if err != nil {
			t.Fatalf("%s: open raft.db: %v", g.version, err)
		}
		defer bs.Close()
		first, err := bs.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		last, err := bs.LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		if first != 1 || last < 2 {
			t.Fatalf("%s: raft.db holds entries %d..%d, want every entry from 1", g.version, first, last)
		}
		if term, err := bs.GetUint64([]byte("CurrentTerm")); err != nil || term == 0 {
			t.Errorf("%s: stable store's CurrentTerm %d (%v)", g.version, term, err)
		}
		var logs []*raft.Log
		types := map[string]int{}
		var writes, mutations int
		for i := first; i <= last; i++ {
			l := new(raft.Log)
			if err := bs.GetLog(i, l); err != nil {
				t.Fatalf("%s: entry %d: %v", g.version, i, err)
			}
			logs = append(logs, l)
			if l.Type != raft.LogCommand {
				types[l.Type.String()]++
				continue
			}
			if len(l.Data) < 3 || l.Data[0] != 0xBA || l.Data[1] != 0x70 || l.Data[2] != 1 {
				t.Fatalf("%s: entry %d: framing % x, want ba 70 01", g.version, i, l.Data[:min(3, len(l.Data))])
			}
			var env raftpb.Envelope
			if err := proto.Unmarshal(l.Data[3:], &env); err != nil || unknownFields(env.ProtoReflect()) {
				t.Fatalf("%s: entry %d: envelope %v (%v)", g.version, i, &env, err)
			}
			name, known := raftpb.CommandType_name[int32(env.Type)]
			if !known || env.Type == raftpb.CommandType_COMMAND_TYPE_UNSPECIFIED {
				t.Fatalf("%s: entry %d: command type %d", g.version, i, env.Type)
			}
			types[name]++
			if env.Type == raftpb.CommandType_COMMAND_TYPE_PROC_BATCH {
				var pb raftpb.ProcBatch
				if err := proto.Unmarshal(env.Payload, &pb); err != nil || unknownFields(pb.ProtoReflect()) {
					t.Fatalf("%s: entry %d: batch %v (%v)", g.version, i, &pb, err)
				}
				for _, w := range pb.Writes {
					writes++
					mutations += len(w.Mutations)
				}
			}
		}
		if types["COMMAND_TYPE_PROC_BATCH"] == 0 || types["COMMAND_TYPE_NOOP"] == 0 || writes == 0 || mutations == 0 {
			t.Errorf("%s: entries by type %v, %d writes, %d mutations", g.version, types, writes, mutations)
		}
		t.Logf("%s: raft.db entries %d..%d by type %v: %d writes, %d mutations", g.version, first, last, types, writes, mutations)

		replay, err := raftfsm.NewFSM(raftfsm.Config{Dir: t.TempDir(), WAL: store.WALConfig{NoSync: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer replay.Close()
		for i, r := range replay.ApplyBatch(logs) {
			if r != nil {
				t.Errorf("%s: entry %d refused by the current FSM: %v", g.version, logs[i].Index, r)
			}
		}
		wal := openFSM(t, g)
		if wal.LoadedIndex() > last || replay.AppliedIndex() != last {
			t.Errorf("%s: local WAL at %d, replay at %d, log ends at %d", g.version, wal.LoadedIndex(), replay.AppliedIndex(), last)
		}
		if !sameState(t, replay, wal) {
			t.Errorf("%s: replaying raft.db gives another state than the release's local WAL", g.version)
		}
	})
}

// unknownFields reports whether m or a message in it has fields the
// current schema does not know: a field the release wrote that the
// current code would drop.
func unknownFields(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() || fd.Message() == nil:
		case fd.IsList():
			for i := range v.List().Len() {
				found = found || unknownFields(v.List().Get(i).Message())
			}
		default:
			found = unknownFields(v.Message())
		}
		return !found
	})
	return found
}

// sleepV2 is diag's sleep as a next version might register it, to show
// that a release's records take the StateUpgrader path.
type sleepV2 struct {
	diag.Sleep
	from int
}

func (p *sleepV2) UpgradeState(from int, decode func(old any) error) error {
	var old diag.Sleep
	if err := decode(&old); err != nil {
		return err
	}
	p.Steps, p.Delay, p.Done, p.from = old.Steps, old.Delay, old.Done, from
	return nil
}

// TestGoldenProcedureStates decodes the state of every procedure the
// release's WAL holds through the current registry, as a loading
// executor does, and checks what the in-flight ones were doing; then
// through a registry with a newer sleep, by its StateUpgrader.
func TestGoldenProcedureStates(t *testing.T) {
	eachRelease(t, func(t *testing.T, g *golden) {
		f := openFSM(t, g)
		reg := registry(t)
		decoded := map[uint64]procedure.Procedure{}
		var finished int
		if err := f.Procs(func(p store.Proc) error {
			proc, ok, err := reg.DecodeState(p.Data)
			switch {
			case err != nil:
				t.Errorf("%s: procedure %d: %v", g.version, p.ID, err)
			case ok:
				decoded[p.ID] = proc
			default:
				finished++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var inFlight int
		for _, lp := range g.procs {
			if lp.State != "SUCCESS" && lp.State != "ROLLEDBACK" || lp.ParentID != 0 {
				inFlight++
			}
		}
		if len(decoded) != inFlight || finished != len(g.procs)-inFlight {
			t.Errorf("%s: %d states decoded and %d finished roots, want %d and %d", g.version, len(decoded), finished, inFlight, len(g.procs)-inFlight)
		}

		r := g.roles
		if s, ok := decoded[r.SleepMidway].(*diag.Sleep); !ok || s.Steps != 2 || s.Done != 1 || s.Delay != 20*time.Second {
			t.Errorf("%s: the mid-way sleep decoded as %#v", g.version, decoded[r.SleepMidway])
		}
		// Past PRE_OPERATION, WRITE_LAYOUT and ASSIGN_REGIONS (1-3), its
		// regions' procedures all spawned, it waits for them before
		// MARK_ENABLED (4) (create_table.go).
		if ct, ok := decoded[r.PendingTableCreate].(*domain.CreateTable); !ok || ct.Namespace != "ns1" || ct.Name != "pending" ||
			ct.Regions != 4 || ct.Spawned != 4 || ct.CurrentState() != 4 || !slices.Equal(ct.History(), []int32{1, 2, 3}) {
			t.Errorf("%s: the pending create decoded as %#v", g.version, decoded[r.PendingTableCreate])
		}
		for id, desc := range map[uint64]string{r.HeldLock: "golden-held", r.WaitingLock: "golden-waiter"} {
			lk, ok := decoded[id].(*domain.LockProcedure)
			if !ok || lk.Kind != "table" || !slices.Equal(lk.Names, []string{"ns1:done"}) || !lk.Exclusive ||
				lk.LeaseMs != time.Hour.Milliseconds() || lk.Description != desc || lk.Holder == "" {
				t.Errorf("%s: lock %d decoded as %#v", g.version, id, decoded[id])
			}
		}
		// 2 is LockProcedure's HELD (lock.go).
		if lk, _ := decoded[r.HeldLock].(*domain.LockProcedure); lk == nil || lk.CurrentState() != 2 {
			t.Errorf("%s: the held lock is not in its held state", g.version)
		}
		var rel released
		readJSON(t, g.path("regions.json"), &rel)
		var transits int
		for id, p := range decoded {
			tr, ok := p.(*domain.TransitRegionState)
			if !ok {
				continue
			}
			transits++
			if tr.Namespace != "ns1" || tr.Table != "pending" || tr.Kind == "" {
				t.Errorf("%s: transit %d decoded as %#v", g.version, id, tr)
			}
			for _, lr := range rel.Regions {
				if lr.ProcID == id && (lr.Name != tr.Region || lr.Server != tr.Server.ID || tr.Server.StartCode == 0) {
					t.Errorf("%s: transit %d of %s to %v; the release listed %s on %s", g.version, id, tr.Region, tr.Server, lr.Name, lr.Server)
				}
			}
		}
		if transits != 4 {
			t.Errorf("%s: %d transits decoded, want the pending create's 4", g.version, transits)
		}

		up := procedure.NewRegistry()
		if err := domain.Register(up); err != nil {
			t.Fatal(err)
		}
		if err := up.Register(diag.TypeSleep, 2, func() procedure.Procedure { return &sleepV2{} }); err != nil {
			t.Fatal(err)
		}
		data, _ := f.Proc(r.SleepMidway)
		p, ok, err := up.DecodeState(data)
		if s, _ := p.(*sleepV2); err != nil || !ok || s == nil || s.from != 1 || s.Steps != 2 || s.Done != 1 || s.Delay != 20*time.Second {
			t.Errorf("%s: the mid-way sleep upgraded to v2 as %#v (%v)", g.version, p, err)
		}
	})
}
