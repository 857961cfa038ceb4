package testnet

import (
	"slices"
	"sync"

	"github.com/hashicorp/raft"
)

// Mesh is the network between raft's in-memory transports: it connects
// them all to all, and cuts and restores the links between them as a
// faulty network between masters would. Every in-process cluster of the
// tests (cluster's node tests, cluster/clustertest) partitions through it,
// so "isolate" means the same everywhere. A link is one way: i reaching j
// says nothing of j reaching i; Partition and Heal act on both. A Mesh is
// safe for concurrent use.
type Mesh struct {
	mu    sync.Mutex
	trans []*raft.InmemTransport
	links [][]bool // links[i][j]: trans[i] reaches trans[j]
}

// NewMesh connects every transport to every other.
func NewMesh(trans ...*raft.InmemTransport) *Mesh {
	m := &Mesh{trans: trans, links: make([][]bool, len(trans))}
	for i := range trans {
		m.links[i] = make([]bool, len(trans))
	}
	m.Heal()
	return m
}

// Len is the number of transports in the mesh.
func (m *Mesh) Len() int { return len(m.trans) }

func (m *Mesh) connect(i, j int) {
	m.trans[i].Connect(m.trans[j].LocalAddr(), m.trans[j])
	m.links[i][j] = true
}

func (m *Mesh) disconnect(i, j int) {
	m.trans[i].Disconnect(m.trans[j].LocalAddr())
	m.links[i][j] = false
}

// Partition cuts the links between the members of group and the others,
// both ways; the members keep reaching each other. With one index it
// isolates that member.
func (m *Mesh) Partition(group ...int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.trans {
		if !slices.Contains(group, i) {
			continue
		}
		for j := range m.trans {
			if !slices.Contains(group, j) {
				m.disconnect(i, j)
				m.disconnect(j, i)
			}
		}
	}
}

// Heal restores every link of the members listed, both ways, or every link
// of the mesh if none is listed.
func (m *Mesh) Heal(members ...int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.trans {
		for j := range m.trans {
			if i == j || m.links[i][j] {
				continue
			}
			if len(members) == 0 || slices.Contains(members, i) || slices.Contains(members, j) {
				m.connect(i, j)
			}
		}
	}
}

// Restore re-makes member i's outbound links that the mesh holds up: a
// raft shut down closes its in-memory transport, which drops every peer it
// reached, so a member started again on the same transport would reach no
// one (and a cluster whose members have all restarted, no leader).
// Links the test cut stay cut.
func (m *Mesh) Restore(i int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for j := range m.trans {
		if i != j && m.links[i][j] {
			m.connect(i, j)
		}
	}
}

// Connected reports whether member i reaches member j.
func (m *Mesh) Connected(i, j int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.links[i][j]
}
