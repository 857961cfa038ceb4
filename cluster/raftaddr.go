package cluster

import (
	"fmt"
	"net"
)

// raftListenAddrs are the Raft transport's advertised address and the
// address it listens on. Without a separate bind the transport listens on
// RaftAddr and advertises it as it resolves, as it always has. With one,
// RaftAddr is advertised as given: resolving it here would fail where a
// node's own name is not yet in DNS when it starts (a StatefulSet pod's),
// and would put an address that changes with the pod into the votes and
// heartbeats the other members read the leader's address from.
func raftListenAddrs(raftAddr, raftBind string) (net.Addr, string, error) {
	if raftBind == "" {
		adv, err := net.ResolveTCPAddr("tcp", raftAddr)
		if err != nil {
			return nil, "", fmt.Errorf("cluster: RaftAddr: %w", err)
		}
		return adv, raftAddr, nil
	}
	return advertisedAddr(raftAddr), raftBind, nil
}

// advertisedAddr is a TCP address kept as its host:port text, a name
// unresolved.
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }
