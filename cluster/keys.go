package cluster

// Names of the replicated keys a node publishes about itself. They live
// with the node, not the admin API, because every layer that answers "ask
// the leader" (the admin API, the domain's region server service) reads
// them.

// AdminAddrKey is the replicated key under which node id publishes its
// admin API address ("nodes/<id>/admin_addr").
func AdminAddrKey(id string) string { return "nodes/" + id + "/admin_addr" }

// HTTPAddrKey is the replicated key under which node id publishes its HTTP
// address ("nodes/<id>/http_addr"): where its status, metrics and web
// console answer, so that a standby's console can link to the leader's.
func HTTPAddrKey(id string) string { return "nodes/" + id + "/http_addr" }

// VersionKey is the replicated key under which the leader keeps node id's
// report of its binary ("nodes/<id>/version", version.EncodeReport): its
// version and the highest format level it writes and reads. A member
// without one (0.1.0 sends none) counts as format 1: ReadReport.
func VersionKey(id string) string { return "nodes/" + id + "/version" }

// ClusterFormatKey is the replicated key holding the cluster version
// (version.EncodeClusterFormat): the format level every member reads,
// which the leader raises and never lowers. Absent: version.Format1.
const ClusterFormatKey = "cluster/format"

// ClusterIDKey is the replicated key holding the cluster's id: a random
// id the leader writes once, when the cluster version allows format 2
// (0.1.0 reads no key under cluster/), and never changes. Absent: the
// cluster has none yet. Snapshot files carry it.
const ClusterIDKey = "cluster/id"

// RestoredKey marks a state built by `baton snapshot restore` (JSON
// RestoredMark) until a leader of the restored cluster has held its
// dispatch for a region server's self-fence period: the snapshot is older
// than the region servers' reality, and a server it does not know (or a
// region moved after the save) may still host a region the restored state
// places elsewhere, until that server hears of the new cluster or fences
// itself. Written by every member's restore alike, so it carries nothing
// of the moment each ran.
const RestoredKey = "cluster/restored"

// RestoredMark is RestoredKey's value: what the state was restored from.
type RestoredMark struct {
	From  string `json:"from,omitempty"` // the snapshot's cluster id
	Index uint64 `json:"index"`          // the snapshot's raft index
}
