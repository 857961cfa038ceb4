package compat_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
	"github.com/baton-dev/baton/store"
)

// TestCarriedAuditEntryKnownToReleases: the entry that commits a
// submission with its audit record (the admin API's, carried since 0.2.0
// in the submission's own PROC_BATCH write as a domain put) uses only what
// each release's schema knows: a PROC_BATCH whose write holds an insert
// and a mutation, as 0.1.0 already wrote and applied (InsertWith). So it
// is no new format, and no cluster version gates it: a member of any
// release applies it as it applies the trail's own entries.
func TestCarriedAuditEntryKnownToReleases(t *testing.T) {
	rec, err := proto.Marshal(&adminpb.AuditRecord{Id: "7-1", Method: "SubmitProcedure", Code: "OK", ProcIds: []uint64{42}})
	if err != nil {
		t.Fatal(err)
	}
	entry, err := raftfsm.EncodeFencedProcBatch(7, raftfsm.Write{
		Inserts:   []store.Proc{{ID: 42, Data: []byte("image")}},
		Mutations: []raftfsm.Mutation{raftfsm.Put(access.AuditKey(7, 1), rec)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if entry[0] != 0xba || entry[1] != 0x70 || entry[2] != 1 {
		t.Fatalf("framing % x", entry[:3])
	}
	for _, v := range releases {
		t.Run(v, func(t *testing.T) {
			files := loadWire(t, v)
			decode := func(name protoreflect.FullName, b []byte) protoreflect.Message {
				t.Helper()
				d, err := files.FindDescriptorByName(name)
				if err != nil {
					t.Fatalf("%s: %s: %v", v, name, err)
				}
				m := dynamicpb.NewMessage(d.(protoreflect.MessageDescriptor))
				if err := proto.Unmarshal(b, m); err != nil {
					t.Fatalf("%s reads %s: %v", v, name, err)
				}
				if unknownFields(m) {
					t.Fatalf("%s finds fields it does not know in %s", v, name)
				}
				return m
			}
			env := decode("baton.raftfsm.v1.Envelope", entry[3:])
			typ := env.Get(env.Descriptor().Fields().ByName("type")).Enum()
			if ev := env.Descriptor().Fields().ByName("type").Enum().Values().ByNumber(typ); ev == nil || ev.Name() != "COMMAND_TYPE_PROC_BATCH" {
				t.Fatalf("%s: command type %d", v, typ)
			}
			batch := decode("baton.raftfsm.v1.ProcBatch", env.Get(env.Descriptor().Fields().ByName("payload")).Bytes())
			w := batch.Get(batch.Descriptor().Fields().ByName("writes")).List()
			if w.Len() != 1 {
				t.Fatalf("%s: %d writes", v, w.Len())
			}
			muts := w.Get(0).Message().Get(w.Get(0).Message().Descriptor().Fields().ByName("mutations")).List()
			ins := w.Get(0).Message().Get(w.Get(0).Message().Descriptor().Fields().ByName("inserts")).List()
			if muts.Len() != 1 || ins.Len() != 1 {
				t.Fatalf("%s: %d inserts, %d mutations", v, ins.Len(), muts.Len())
			}
		})
	}
}
