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
