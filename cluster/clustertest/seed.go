package clustertest

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/hashicorp/raft"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/raftfsm"
)

// seedBatch is how many records one seeding Raft entry carries: a few
// hundred kilobytes, well under what the transport takes in one message.
const seedBatch = 4000

// SeedTable writes table full ("ns:name", in state) and n region records
// straight into the replicated state, through the leader's Raft in
// batches: a layout of a size no test could create table by table (a
// hundred thousand regions), for the listings to list. Nothing is
// dispatched: region i is recorded as place(i) says (its Table is set
// here), named domain.RegionName(full, i, procID). It returns the region
// names in order. The records are committed and applied on the leader
// when it returns. Test goroutine only.
func (c *Cluster) SeedTable(full, state string, n int, procID uint64, place func(i int) domain.Region) []string {
	c.t.Helper()
	tb, err := json.Marshal(domain.Table{State: state, ProcID: procID})
	if err != nil {
		c.t.Fatal(err)
	}
	names := make([]string, n)
	muts := []raftfsm.Mutation{raftfsm.Put(domain.TableKey(full), tb)}
	for i := range n {
		rg := place(i)
		rg.Table = full
		b, err := json.Marshal(rg)
		if err != nil {
			c.t.Fatal(err)
		}
		names[i] = domain.RegionName(full, i, procID)
		muts = append(muts, raftfsm.Put(domain.RegionKey(names[i]), b))
		if len(muts) == seedBatch || i == n-1 {
			c.applyMutations(muts)
			muts = muts[:0]
		}
	}
	if n == 0 {
		c.applyMutations(muts)
	}
	return names
}

// DeleteRegion removes region name's record, as a table's deletion would.
func (c *Cluster) DeleteRegion(name string) {
	c.t.Helper()
	c.applyMutations([]raftfsm.Mutation{raftfsm.Del(domain.RegionKey(name))})
}

// applyMutations commits domain mutations as one PROC_BATCH entry on the
// leader's Raft, as the admin API's domain writes are. An election on a
// loaded machine (leadership lost, or not the leader any more) sends the
// entry again to the next leader: puts and deletes of fixed values may
// commit twice with the same effect.
func (c *Cluster) applyMutations(muts []raftfsm.Mutation) {
	c.t.Helper()
	data, err := raftfsm.EncodeProcBatch(raftfsm.Write{Mutations: muts})
	if err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(c.cfg.WaitTimeout)
	var f raft.ApplyFuture
	for {
		f = c.Leader().Node().Raft().Apply(data, 30*time.Second)
		err := f.Error()
		if err == nil {
			break
		}
		if !errors.Is(err, raft.ErrLeadershipLost) && !errors.Is(err, raft.ErrNotLeader) || time.Now().After(deadline) {
			c.t.Fatalf("clustertest: seeding %d records: %v", len(muts), err)
		}
		c.t.Logf("clustertest: seeding %d records: %v: sending them again to the next leader", len(muts), err)
	}
	if rerr, ok := f.Response().(error); ok && rerr != nil {
		c.t.Fatalf("clustertest: seeding %d records refused: %v", len(muts), rerr)
	}
}

// SeedRecord commits the record at key as is, past every check the API
// makes: a record as release 0.1.0 may have stored it (a region server's
// address of megabytes).
func (c *Cluster) SeedRecord(key string, val []byte) {
	c.t.Helper()
	c.applyMutations([]raftfsm.Mutation{raftfsm.Put(key, val)})
}

// SeedNamespaces commits the records of namespaces names, in batches.
func (c *Cluster) SeedNamespaces(names []string) {
	c.t.Helper()
	var muts []raftfsm.Mutation
	for i, n := range names {
		b, err := json.Marshal(domain.Namespace{Name: n})
		if err != nil {
			c.t.Fatal(err)
		}
		muts = append(muts, raftfsm.Put(domain.NamespaceKey(n), b))
		if len(muts) == seedBatch || i == len(names)-1 {
			c.applyMutations(muts)
			muts = muts[:0]
		}
	}
}

// SeedRecords commits records as SeedRecord does, in batches: very many
// records, each as 0.1.0 may have stored it.
func (c *Cluster) SeedRecords(records map[string][]byte) {
	c.t.Helper()
	var muts []raftfsm.Mutation
	for k, v := range records {
		muts = append(muts, raftfsm.Put(k, v))
		if len(muts) == seedBatch {
			c.applyMutations(muts)
			muts = muts[:0]
		}
	}
	if len(muts) > 0 {
		c.applyMutations(muts)
	}
}
