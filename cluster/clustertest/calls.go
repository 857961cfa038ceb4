package clustertest

import (
	"sync/atomic"

	"github.com/baton-dev/baton/internal/rpcfault"
)

// CountCalls returns a counter of the calls of the methods given (full
// names, or service prefixes as in rpcfault.Rule) that the masters' gRPC
// servers receive from now on, whatever their outcome. rpcfault counts
// only the calls it faults, so the counter is a rule that never fires: its
// predicate counts the calls offered to it. Rules added before it that
// fire on a call hide that call from it.
func (c *Cluster) CountCalls(methods ...string) func() int {
	var n atomic.Int64
	h := c.faults.MustAdd(rpcfault.Rule{
		Name:    "count",
		Methods: methods,
		// DropRequest is decided before the handler, for streams too, so
		// the predicate sees every call once.
		Fault: rpcfault.DropRequest,
		When: func(call rpcfault.Call) bool {
			if call.Side == rpcfault.Server {
				n.Add(1)
			}
			return false
		},
	})
	c.t.Cleanup(h.Remove)
	return func() int { return int(n.Load()) }
}
