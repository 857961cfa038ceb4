package main

import (
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/admin"
)

// TestInitialClusterSize: --initial-cluster-size derives the bootstrap
// peers (ordinal < N) or the join addresses (ordinal >= N) from the
// StatefulSet names, from flags and from the environment, and
// --listen-host moves only where the node listens.
func TestInitialClusterSize(t *testing.T) {
	const dom = ".baton-master-headless.ns.svc.cluster.local"
	node := func(i string) []string {
		return []string{"--id", "baton-master-" + i, "--data-dir", "/data", "--raft-addr", "baton-master-" + i + dom + ":7071",
			"--grpc-addr", "baton-master-" + i + dom + ":7070", "--http-addr", "0.0.0.0:7072", "--insecure"}
	}
	base := func(i string) agentConfig {
		return agentConfig{ID: "baton-master-" + i, DataDir: "/data", RaftAddr: "baton-master-" + i + dom + ":7071", GRPCAddr: "baton-master-" + i + dom + ":7070",
			HTTPAddr: "0.0.0.0:7072", Insecure: true, InitialClusterSize: 3}
	}
	three := []cluster.Peer{{ID: "baton-master-0", Address: "baton-master-0" + dom + ":7071"}, {ID: "baton-master-1", Address: "baton-master-1" + dom + ":7071"},
		{ID: "baton-master-2", Address: "baton-master-2" + dom + ":7071"}}
	admins := func(ords ...string) (out []string) {
		for _, o := range ords {
			out = append(out, "baton-master-"+o+dom+":7070")
		}
		return out
	}
	with := func(c agentConfig, f func(*agentConfig)) agentConfig { f(&c); return c }
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want agentConfig
		err  string // substring of the usage error; "" = valid
	}{
		{name: "first member", args: append(node("0"), "--initial-cluster-size", "3"), want: with(base("0"), func(c *agentConfig) { c.Peers, c.DerivedAdmin = three, admins("1", "2") })},
		{name: "last of the initial members", args: append(node("2"), "--initial-cluster-size", "3", "--listen-host", "0.0.0.0"),
			want: with(base("2"), func(c *agentConfig) { c.Peers, c.ListenHost, c.DerivedAdmin = three, "0.0.0.0", admins("0", "1") })},
		{name: "scale-up joins", args: append(node("3"), "--initial-cluster-size", "3"), want: with(base("3"), func(c *agentConfig) {
			c.Join = []string{"baton-master-0" + dom + ":7070", "baton-master-1" + dom + ":7070", "baton-master-2" + dom + ":7070"}
		})},
		{name: "far ordinal joins", args: append(node("10"), "--initial-cluster-size", "1"), want: with(base("10"), func(c *agentConfig) {
			c.InitialClusterSize, c.Join = 1, []string{"baton-master-0" + dom + ":7070"}
		})},
		{name: "from the environment", env: map[string]string{"BATON_INITIAL_CLUSTER_SIZE": "3", "BATON_LISTEN_HOST": "::"}, args: node("1"),
			want: with(base("1"), func(c *agentConfig) { c.Peers, c.ListenHost, c.DerivedAdmin = three, "::", admins("0", "2") })},
		{name: "bare pod names", args: []string{"--id", "m-1", "--data-dir", "/d", "--raft-addr", "m-1:7071", "--grpc-addr", "m-1:7070", "--insecure", "--initial-cluster-size", "2"},
			want: agentConfig{ID: "m-1", DataDir: "/d", RaftAddr: "m-1:7071", GRPCAddr: "m-1:7070", Insecure: true, InitialClusterSize: 2,
				Peers: []cluster.Peer{{ID: "m-0", Address: "m-0:7071"}, {ID: "m-1", Address: "m-1:7071"}}, DerivedAdmin: []string{"m-0:7070"}}},
		{name: "listen host alone", args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "n1.lan:7071", "--grpc-addr", "n1.lan:7070", "--insecure", "--listen-host", "10.0.0.1"},
			want: agentConfig{ID: "n1", DataDir: "/d", RaftAddr: "n1.lan:7071", GRPCAddr: "n1.lan:7070", Insecure: true, ListenHost: "10.0.0.1"}},

		{name: "with peers", args: append(node("0"), "--initial-cluster-size", "3", "--peers", "baton-master-0=baton-master-0"+dom+":7071"),
			err: "--initial-cluster-size derives the members from the StatefulSet's names: drop --peers and --join"},
		{name: "with join", args: append(node("3"), "--initial-cluster-size", "3", "--join", "x:7070"), err: "drop --peers and --join"},
		{name: "with peers from the environment", env: map[string]string{"BATON_PEERS": "a=b:1"}, args: append(node("0"), "--initial-cluster-size", "3"), err: "drop --peers and --join"},
		{name: "with dev", args: []string{"--dev", "--initial-cluster-size", "3"}, err: "--dev runs a single-node cluster: drop --initial-cluster-size"},
		{name: "no ordinal", args: []string{"--id", "master", "--data-dir", "/d", "--raft-addr", "master:7071", "--grpc-addr", "master:7070", "--insecure", "--initial-cluster-size", "3"},
			err: `--initial-cluster-size: --id "master" has no ordinal: want NAME-ORDINAL`},
		{name: "leading zero", args: []string{"--id", "m-01", "--data-dir", "/d", "--raft-addr", "m-01:7071", "--grpc-addr", "m-01:7070", "--insecure", "--initial-cluster-size", "3"},
			err: `--id "m-01" has no ordinal`},
		{name: "nothing before the ordinal", args: []string{"--id", "-1", "--data-dir", "/d", "--raft-addr", "h:7071", "--grpc-addr", "h:7070", "--insecure", "--initial-cluster-size", "3"},
			err: `--id "-1" has no ordinal`},
		{name: "raft host not the id", args: []string{"--id", "m-0", "--data-dir", "/d", "--raft-addr", "10.0.0.1:7071", "--grpc-addr", "m-0.h:7070", "--insecure", "--initial-cluster-size", "3"},
			err: "--initial-cluster-size: --raft-addr 10.0.0.1:7071: the host's first DNS label must be the id m-0"},
		{name: "grpc host not the id", args: []string{"--id", "m-0", "--data-dir", "/d", "--raft-addr", "m-0.h:7071", "--grpc-addr", "m-00.h:7070", "--insecure", "--initial-cluster-size", "3"},
			err: "--grpc-addr m-00.h:7070: the host's first DNS label must be the id m-0"},
		{name: "size zero", args: append(node("0"), "--initial-cluster-size", "0"), err: `--initial-cluster-size "0": want the number of masters the cluster starts with, in 1..99`},
		{name: "size not a number", args: append(node("0"), "--initial-cluster-size", "three"), err: `--initial-cluster-size "three"`},
		{name: "bad listen host", args: append(node("0"), "--listen-host", "0.0.0.0:7071"), err: `--listen-host "0.0.0.0:7071": want a host name or an IP address`},
		{name: "listen host plaintext", args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "127.0.0.1:7071", "--grpc-addr", "127.0.0.1:7070", "--listen-host", "0.0.0.0"},
			err: "--listen-host 0.0.0.0: not loopback"},
		{name: "listen host same ports", args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "a:7071", "--grpc-addr", "b:7071", "--insecure", "--listen-host", "0.0.0.0"},
			err: "--listen-host 0.0.0.0: --raft-addr and --grpc-addr both have port 7071"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAgentFlags(tc.args, func(k string) string { return tc.env[k] }, io.Discard, io.Discard)
			if usageErrorCase(t, err, tc.err) {
				return
			}
			got.TLSFrom = tlsSources{}
			tc.want.ChangeRate, tc.want.ChangeBurst = admin.DefaultChangeRate, admin.DefaultChangeBurst
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestInitialClusterSizeExitCodes: every refusal exits 2 saying why on
// stderr, before anything starts.
func TestInitialClusterSizeExitCodes(t *testing.T) {
	n0 := []string{"agent", "--id", "m-0", "--data-dir", t.TempDir(), "--raft-addr", "m-0.h:7071", "--grpc-addr", "m-0.h:7070", "--insecure"}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{append(n0, "--initial-cluster-size", "3", "--peers", "m-0=m-0.h:7071"), nil, "drop --peers and --join"},
		{append(n0, "--initial-cluster-size", "3", "--join", "m-1.h:7070"), nil, "drop --peers and --join"},
		{[]string{"agent", "--dev", "--initial-cluster-size", "3"}, nil, "drop --initial-cluster-size"},
		{[]string{"agent", "--id", "m", "--data-dir", "d", "--raft-addr", "m:7071", "--grpc-addr", "m:7070", "--insecure", "--initial-cluster-size", "3"}, nil, "has no ordinal"},
		{[]string{"agent", "--id", "m-0", "--data-dir", "d", "--raft-addr", "x.h:7071", "--grpc-addr", "m-0.h:7070", "--insecure", "--initial-cluster-size", "3"}, nil, "first DNS label must be the id"},
		{n0, map[string]string{"BATON_INITIAL_CLUSTER_SIZE": "-1"}, `--initial-cluster-size "-1"`},
		{n0, map[string]string{"BATON_LISTEN_HOST": "a b"}, `--listen-host "a b"`},
		{[]string{"regionserver", "--id", "rs-0", "--grpc-addr", "rs-0.h:7080", "--masters", "m-0.h:7070", "--insecure", "--listen-host", "0.0.0.0:1"}, nil, `--listen-host "0.0.0.0:1"`},
	} {
		code, stdout, stderr := runCLI(t, tc.env, tc.args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}
