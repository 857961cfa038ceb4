package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/security"
)

// maxInitialClusterSize bounds --initial-cluster-size: a Raft group past
// a few voters only slows its writes (docs/operations.md), and the bound
// keeps a typo from deriving thousands of members.
const maxInitialClusterSize = 99

// deriveMembers fills cfg.Peers (ordinal < n: a member of the initial
// cluster, bootstrapped from them on its first start, as --peers, unless
// the others' admin addresses, cfg.DerivedAdmin, answer that their
// cluster runs already: bootstrapGuard) or
// cfg.Join (ordinal >= n: a later member, joining through the initial
// ones' admin addresses) from the StatefulSet names of --initial-cluster-size:
// member i is this node's id with the ordinal i, at this node's raft (or
// admin) host with its first DNS label that id. Nobody writes a peer list
// that could differ between pods, and every pod gets the same arguments.
func (f nodeFlags) deriveMembers(cfg *agentConfig, bad func(string, ...any)) {
	v := strings.TrimSpace(*f.initialSize)
	if v == "" {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxInitialClusterSize {
		bad("--initial-cluster-size %q: want the number of masters the cluster starts with, in 1..%d", v, maxInitialClusterSize)
		return
	}
	cfg.InitialClusterSize = n
	if *f.peers != "" || *f.join != "" {
		bad("--initial-cluster-size derives the members from the StatefulSet's names: drop --peers and --join (or drop --initial-cluster-size)")
		return
	}
	if cfg.ID == "" || cfg.RaftAddr == "" || cfg.GRPCAddr == "" {
		return // said missing already
	}
	name, ord, ok := statefulSetOrdinal(cfg.ID)
	if !ok {
		bad("--initial-cluster-size: --id %q has no ordinal: want NAME-ORDINAL, a StatefulSet pod's name such as baton-master-0", cfg.ID)
		return
	}
	raftRest, raftPort, ok1 := hostAfterID("--raft-addr", cfg.RaftAddr, cfg.ID, bad)
	grpcRest, grpcPort, ok2 := hostAfterID("--grpc-addr", cfg.GRPCAddr, cfg.ID, bad)
	if !ok1 || !ok2 {
		return
	}
	for i := range n {
		id := name + "-" + strconv.Itoa(i)
		if ord < n {
			cfg.Peers = append(cfg.Peers, cluster.Peer{ID: id, Address: net.JoinHostPort(id+raftRest, raftPort)})
			if i != ord {
				cfg.DerivedAdmin = append(cfg.DerivedAdmin, net.JoinHostPort(id+grpcRest, grpcPort))
			}
		} else {
			cfg.Join = append(cfg.Join, net.JoinHostPort(id+grpcRest, grpcPort))
		}
	}
}

// statefulSetOrdinal splits a StatefulSet pod's name, NAME-ORDINAL, into
// its two parts. The ordinal is written as Kubernetes writes it (no sign,
// no leading zero), so that the names derived from it are the pods'.
func statefulSetOrdinal(id string) (name string, ord int, ok bool) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 {
		return "", 0, false
	}
	ord, err := strconv.Atoi(id[i+1:])
	if err != nil || ord < 0 || strconv.Itoa(ord) != id[i+1:] {
		return "", 0, false
	}
	return id[:i], ord, true
}

// hostAfterID is what follows the id in addr's host (".headless.ns.svc..."
// or "") and addr's port, or bad says why addr's host does not start
// with the label id.
func hostAfterID(flagName, addr, id string, bad func(string, ...any)) (rest, port string, ok bool) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", false // said malformed already
	}
	first, _, _ := strings.Cut(host, ".")
	if first != id {
		bad("--initial-cluster-size: %s %s: the host's first DNS label must be the id %s (e.g. %s.baton-master-headless:%s), from which the other members' names are derived",
			flagName, addr, id, id, port)
		return "", "", false
	}
	return host[len(id):], port, true
}

// parseListenHost is --listen-host checked: a host name or an IP address
// (a wildcard such as 0.0.0.0 or ::), without a port.
func parseListenHost(v string, bad func(string, ...any)) string {
	v = strings.TrimSpace(v)
	if v == "" {
		return ""
	}
	h := strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")
	if net.ParseIP(h) != nil {
		return h
	}
	if _, err := security.HostName(h); err != nil || strings.Contains(h, ":") {
		bad("--listen-host %q: want a host name or an IP address such as 0.0.0.0, without a port (the ports are the advertised addresses')", v)
		return ""
	}
	return h
}

// listenOn is where a server advertised at addr listens: at addr itself
// without --listen-host, else on host with addr's port.
func listenOn(host, addr string) string {
	if host == "" {
		return addr
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return net.JoinHostPort(host, port)
}

// listenHostUsage is --listen-host's help, the agent's and the region
// server's.
func listenHostUsage(advertised string) string {
	return fmt.Sprintf("host or IP address to listen on (e.g. 0.0.0.0) with the ports of %s, which are still advertised as given; "+
		"for a pod whose own DNS name may not resolve when it starts. --http-addr is a listening address already and is not changed. Default: listen on the advertised addresses", advertised)
}

// derivedMembersLine says, for the banner, what --initial-cluster-size
// derived: the bootstrap peers, or the admin addresses joined through
// (also by an initial member whose cluster ran without it: bootstrapGuard).
func derivedMembersLine(cfg agentConfig) string {
	switch {
	case len(cfg.Join) > 0 && len(cfg.Peers) > 0:
		return "join through " + strings.Join(cfg.Join, ",") + " (no raft state here, and the cluster runs already)"
	case len(cfg.Peers) > 0:
		return "bootstrap (first start only) with " + cluster.FormatPeers(cfg.Peers)
	}
	return "join through " + strings.Join(cfg.Join, ",")
}
