package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/security"
)

// usageErrorCase checks a parse's err against want, a case's expected usage
// error, and says whether the case ends there: with want set, err must be
// a usage error containing it; without, err must be nil and the parsed
// config is the case's to check.
func usageErrorCase(t *testing.T, err error, want string) bool {
	t.Helper()
	if want != "" {
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want a usage error containing %q", err, want)
		}
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}

// agentUsageCase is a `baton agent --dev` command line that must be
// refused: args, and what its complaint says.
type agentUsageCase struct {
	args []string
	want string
}

// checkAgentUsageErrors runs each case's agent and checks it exits with a
// usage error, nothing on stdout, and the complaint on stderr.
func checkAgentUsageErrors(t *testing.T, cases []agentUsageCase) {
	t.Helper()
	for _, tc := range cases {
		code, stdout, stderr := runCLI(t, nil, append([]string{"agent", "--dev", "--data-dir", t.TempDir()}, tc.args...)...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("agent %v: exit %d, stderr %q; want exit %d naming %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}

func TestParseAgentFlags(t *testing.T) {
	three := "n1=10.0.0.1:7071,n2=10.0.0.2:7071,n3=10.0.0.3:7071"
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want agentConfig
		err  string // substring of the usage error; "" = valid
	}{
		{name: "dev defaults", args: []string{"--dev"}, want: agentConfig{ID: "dev", DataDir: "./baton-data", RaftAddr: "127.0.0.1:7071",
			GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:7072", Dev: true, DevRegionServers: 3, Peers: []cluster.Peer{{ID: "dev", Address: "127.0.0.1:7071"}}}},
		{name: "dev from env with overrides", env: map[string]string{"BATON_DEV": "true", "BATON_DATA_DIR": "/tmp/d"}, args: []string{"--grpc-addr", "127.0.0.1:9000"},
			want: agentConfig{ID: "dev", DataDir: "/tmp/d", RaftAddr: "127.0.0.1:7071", GRPCAddr: "127.0.0.1:9000", HTTPAddr: "127.0.0.1:7072", Dev: true, DevRegionServers: 3,
				Peers: []cluster.Peer{{ID: "dev", Address: "127.0.0.1:7071"}}}},
		{name: "dev with peers", args: []string{"--dev", "--peers", "a=127.0.0.1:1"}, err: "single-node"},
		{name: "bad BATON_DEV", env: map[string]string{"BATON_DEV": "maybe"}, err: "BATON_DEV"},
		{name: "bootstrap member", args: []string{"--id", "n2", "--data-dir", "/d", "--raft-addr", "10.0.0.2:7071", "--grpc-addr", "10.0.0.2:7070", "--http-addr", ":7072", "--peers", three, "--insecure"},
			want: agentConfig{ID: "n2", DataDir: "/d", RaftAddr: "10.0.0.2:7071", GRPCAddr: "10.0.0.2:7070", HTTPAddr: ":7072", Insecure: true,
				Peers: []cluster.Peer{{ID: "n1", Address: "10.0.0.1:7071"}, {ID: "n2", Address: "10.0.0.2:7071"}, {ID: "n3", Address: "10.0.0.3:7071"}}}},
		{name: "all from env", env: map[string]string{"BATON_ID": "n4", "BATON_DATA_DIR": "/d", "BATON_RAFT_ADDR": "10.0.0.4:7071", "BATON_GRPC_ADDR": "10.0.0.4:7070",
			"BATON_JOIN": "10.0.0.1:7070, 10.0.0.2:7070", "BATON_INSECURE": "true"},
			want: agentConfig{ID: "n4", DataDir: "/d", RaftAddr: "10.0.0.4:7071", GRPCAddr: "10.0.0.4:7070", Join: []string{"10.0.0.1:7070", "10.0.0.2:7070"}, Insecure: true}},
		{name: "flag beats env", env: map[string]string{"BATON_ID": "envid"}, args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "h:1", "--grpc-addr", "h:2", "--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem"},
			want: agentConfig{ID: "n1", DataDir: "/d", RaftAddr: "h:1", GRPCAddr: "h:2", TLS: security.Files{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}, ACL: true}},
		{name: "missing everything", err: "--id is required"},
		{name: "missing data dir", args: []string{"--id", "a", "--raft-addr", "h:1", "--grpc-addr", "h:2"}, err: "--data-dir is required"},
		{name: "missing grpc", args: []string{"--id", "a", "--data-dir", "d", "--raft-addr", "h:1"}, err: "--grpc-addr is required"},
		{name: "wildcard raft", args: []string{"--id", "a", "--data-dir", "d", "--raft-addr", "0.0.0.0:1", "--grpc-addr", "h:2"}, err: "not a wildcard"},
		{name: "empty-host grpc", args: []string{"--id", "a", "--data-dir", "d", "--raft-addr", "h:1", "--grpc-addr", ":2"}, err: "not a wildcard"},
		{name: "bad port", args: []string{"--id", "a", "--data-dir", "d", "--raft-addr", "h:99999", "--grpc-addr", "h:2"}, err: "1..65535"},
		{name: "no port", args: []string{"--id", "a", "--data-dir", "d", "--raft-addr", "h", "--grpc-addr", "h:2"}, err: "want host:port"},
		{name: "same port twice", args: []string{"--id", "a", "--data-dir", "d", "--raft-addr", "h:1", "--grpc-addr", "h:1"}, err: "each needs its own port"},
		{name: "peers and join", args: []string{"--id", "n1", "--data-dir", "d", "--raft-addr", "10.0.0.1:7071", "--grpc-addr", "h:2", "--peers", three, "--join", "h:3"}, err: "not both"},
		{name: "peers without self", args: []string{"--id", "n9", "--data-dir", "d", "--raft-addr", "h:1", "--grpc-addr", "h:2", "--peers", three}, err: "does not list this node"},
		{name: "peers other address", args: []string{"--id", "n1", "--data-dir", "d", "--raft-addr", "h:1", "--grpc-addr", "h:2", "--peers", three}, err: "must match"},
		{name: "malformed peers", args: []string{"--id", "n1", "--data-dir", "d", "--raft-addr", "h:1", "--grpc-addr", "h:2", "--peers", "n1"}, err: "--peers"},
		{name: "bad join", args: []string{"--id", "n1", "--data-dir", "d", "--raft-addr", "h:1", "--grpc-addr", "h:2", "--join", "h:3,nope"}, err: "--join \"nope\""},
		{name: "allowed hosts", args: []string{"--dev", "--http-allowed-hosts", "Baton.Example.com., ops-console,,"},
			want: agentConfig{ID: "dev", DataDir: "./baton-data", RaftAddr: "127.0.0.1:7071", GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:7072", Dev: true, DevRegionServers: 3,
				Peers: []cluster.Peer{{ID: "dev", Address: "127.0.0.1:7071"}}, HTTPAllowedHosts: []string{"baton.example.com", "ops-console"}}},
		{name: "allowed hosts from env", env: map[string]string{"BATON_HTTP_ALLOWED_HOSTS": "console.lan"}, args: []string{"--dev"},
			want: agentConfig{ID: "dev", DataDir: "./baton-data", RaftAddr: "127.0.0.1:7071", GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:7072", Dev: true, DevRegionServers: 3,
				Peers: []cluster.Peer{{ID: "dev", Address: "127.0.0.1:7071"}}, HTTPAllowedHosts: []string{"console.lan"}}},
		{name: "bad allowed host", args: []string{"--dev", "--http-allowed-hosts", "ok,http://x/"}, err: `--http-allowed-hosts: "http://x/" is not a host name`},
		{name: "connection limits and debug", env: map[string]string{"BATON_MAX_CONNS_PER_SOURCE": "32", "BATON_DEBUG_ENDPOINTS": "true"}, args: []string{"--dev", "--handshake-timeout", "2s"},
			want: agentConfig{ID: "dev", DataDir: "./baton-data", RaftAddr: "127.0.0.1:7071", GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:7072", Dev: true, DevRegionServers: 3,
				Peers: []cluster.Peer{{ID: "dev", Address: "127.0.0.1:7071"}}, DebugEndpoints: true, ConnLimits: security.ConnLimits{HandshakeTimeout: 2 * time.Second, MaxPerSource: 32}}},
		{name: "bad handshake timeout", args: []string{"--dev", "--handshake-timeout", "1ms"}, err: `--handshake-timeout "1ms": want a duration from 100ms to 10m0s`},
		{name: "bad conns per source", args: []string{"--dev", "--max-conns-per-source", "0"}, err: `--max-conns-per-source "0": want a number of connections in 1..1000000`},
		{name: "workers", args: []string{"--dev", "--workers", "256"},
			want: agentConfig{ID: "dev", DataDir: "./baton-data", RaftAddr: "127.0.0.1:7071", GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:7072", Dev: true, DevRegionServers: 3,
				Peers: []cluster.Peer{{ID: "dev", Address: "127.0.0.1:7071"}}, Workers: 256}},
		{name: "workers from env", env: map[string]string{"BATON_WORKERS": "32"}, args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "127.0.0.1:1", "--grpc-addr", "localhost:2"},
			want: agentConfig{ID: "n1", DataDir: "/d", RaftAddr: "127.0.0.1:1", GRPCAddr: "localhost:2", Workers: 32}},
		{name: "plaintext beyond loopback", args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "10.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--http-addr", "0.0.0.0:3"},
			err: "--raft-addr 10.0.0.1:1, --http-addr 0.0.0.0:3: not loopback"},
		{name: "TLS from env", env: map[string]string{"BATON_AGENT_TLS_CA": "ca.pem", "BATON_AGENT_TLS_CERT": "c.pem", "BATON_AGENT_TLS_KEY": "k.pem"},
			args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "m1:1", "--grpc-addr", "m1:2"},
			want: agentConfig{ID: "n1", DataDir: "/d", RaftAddr: "m1:1", GRPCAddr: "m1:2", TLS: security.Files{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}, ACL: true}},
		{name: "access control and audit", env: map[string]string{"BATON_ACL_INITIAL_GRANTS": "ops=admin, prom=read", "BATON_AUDIT_MAX_RECORDS": "500"},
			args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--acl", "on", "--audit-retention", "24h", "--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem"},
			want: agentConfig{ID: "n1", DataDir: "/d", RaftAddr: "127.0.0.1:1", GRPCAddr: "127.0.0.1:2", ACL: true, TLS: security.Files{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"},
				ACLInitialGrants: map[string]security.Permission{"ops": security.PermAdmin, "prom": security.PermRead}, AuditRetention: 24 * time.Hour, AuditMaxRecords: 500}},
		{name: "TLS with access control off", args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "m1:1", "--grpc-addr", "m1:2", "--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--acl", "off"},
			want: agentConfig{ID: "n1", DataDir: "/d", RaftAddr: "m1:1", GRPCAddr: "m1:2", TLS: security.Files{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}}},
		{name: "client auth either", args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "m1:1", "--grpc-addr", "m1:2", "--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--client-auth", "either"},
			want: agentConfig{ID: "n1", DataDir: "/d", RaftAddr: "m1:1", GRPCAddr: "m1:2", TLS: security.Files{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}, ACL: true, ClientAuth: security.ClientAuthEither}},
		{name: "client auth from env", env: map[string]string{"BATON_CLIENT_AUTH": "token", "BATON_AGENT_TLS_CA": "ca.pem", "BATON_AGENT_TLS_CERT": "c.pem", "BATON_AGENT_TLS_KEY": "k.pem"},
			args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "m1:1", "--grpc-addr", "m1:2"},
			want: agentConfig{ID: "n1", DataDir: "/d", RaftAddr: "m1:1", GRPCAddr: "m1:2", TLS: security.Files{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}, ACL: true, ClientAuth: security.ClientAuthToken}},
		{name: "bad client auth", args: []string{"--dev", "--client-auth", "password"}, err: `--client-auth "password": want cert, token or either`},
		{name: "client auth without TLS", args: []string{"--dev", "--client-auth", "either"}, err: "--client-auth either needs TLS"},
		{name: "client auth with access control off", args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "m1:1", "--grpc-addr", "m1:2", "--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem", "--client-auth", "token", "--acl", "off"},
			err: "--client-auth token needs --acl on"},
		{name: "acl without TLS", args: []string{"--dev", "--acl", "on"}, err: "--acl on needs TLS"},
		{name: "bad acl", args: []string{"--dev", "--acl", "yes"}, err: "--acl \"yes\": want on or off"},
		{name: "bad grant", args: []string{"--dev", "--acl-initial-grants", "ops=root"}, err: "want client=permission"},
		{name: "bad grant name", args: []string{"--dev", "--acl-initial-grants", "=admin"}, err: "want client=permission"},
		{name: "bad retention", args: []string{"--dev", "--audit-retention", "1s"}, err: "at least 1m"},
		{name: "bad max records", args: []string{"--dev", "--audit-max-records", "0"}, err: "--audit-max-records"},
		{name: "partial TLS", args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--tls-cert", "c.pem"},
			err: "given c.pem (from --tls-cert); missing --tls-ca (or env BATON_AGENT_TLS_CA), --tls-key (or env BATON_AGENT_TLS_KEY)"},
		{name: "dev with TLS", args: []string{"--dev", "--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem"}, err: "--dev runs plaintext"},
		{name: "bad BATON_INSECURE", env: map[string]string{"BATON_INSECURE": "perhaps"}, args: []string{"--dev"}, err: "BATON_INSECURE"},
		{name: "submit rate", args: []string{"--dev", "--submit-rate", "2.5", "--submit-burst", "10"},
			want: agentConfig{ID: "dev", DataDir: "./baton-data", RaftAddr: "127.0.0.1:7071", GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:7072", Dev: true, DevRegionServers: 3,
				Peers: []cluster.Peer{{ID: "dev", Address: "127.0.0.1:7071"}}, SubmitRate: 2.5, SubmitBurst: 10}},
		{name: "submit rate from env", env: map[string]string{"BATON_SUBMIT_RATE": "7"}, args: []string{"--dev"},
			want: agentConfig{ID: "dev", DataDir: "./baton-data", RaftAddr: "127.0.0.1:7071", GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:7072", Dev: true, DevRegionServers: 3,
				Peers: []cluster.Peer{{ID: "dev", Address: "127.0.0.1:7071"}}, SubmitRate: 7}},
		{name: "bad submit rate", args: []string{"--dev", "--submit-rate", "-1"}, err: "--submit-rate"},
		{name: "bad submit burst", args: []string{"--dev", "--submit-burst", "0"}, err: "--submit-burst"},
		{name: "change rate", args: []string{"--dev", "--change-rate", "3", "--change-burst", "9"},
			want: agentConfig{ID: "dev", DataDir: "./baton-data", RaftAddr: "127.0.0.1:7071", GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:7072", Dev: true, DevRegionServers: 3,
				Peers: []cluster.Peer{{ID: "dev", Address: "127.0.0.1:7071"}}, ChangeRate: 3, ChangeBurst: 9}},
		{name: "no change limit from env", env: map[string]string{"BATON_CHANGE_RATE": "0"}, args: []string{"--dev"},
			want: agentConfig{ID: "dev", DataDir: "./baton-data", RaftAddr: "127.0.0.1:7071", GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:7072", Dev: true, DevRegionServers: 3,
				Peers: []cluster.Peer{{ID: "dev", Address: "127.0.0.1:7071"}}, ChangeRate: 0, ChangeBurst: admin.DefaultChangeBurst}},
		{name: "bad change rate", args: []string{"--dev", "--change-rate", "nan"}, err: "--change-rate"},
		{name: "bad change burst", args: []string{"--dev", "--change-burst", "0"}, err: "--change-burst"},
		{name: "no workers", args: []string{"--dev", "--workers", "0"}, err: `--workers "0": want a number of executor workers in 1..4096`},
		{name: "too many workers", args: []string{"--dev", "--workers", "100000"}, err: "1..4096"},
		{name: "workers not a number", args: []string{"--dev", "--workers", "many"}, err: `--workers "many"`},
		{name: "positional", args: []string{"--dev", "extra"}, err: "takes no arguments"},
		{name: "recover quorum", args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--peers", "n1=127.0.0.1:1,n2=127.0.0.1:3", "--recover-quorum", "--yes"},
			want: agentConfig{ID: "n1", DataDir: "/d", RaftAddr: "127.0.0.1:1", GRPCAddr: "127.0.0.1:2", Peers: []cluster.Peer{{ID: "n1", Address: "127.0.0.1:1"}, {ID: "n2", Address: "127.0.0.1:3"}},
				RecoverQuorum: true, Yes: true}},
		{name: "recover quorum not from env", env: map[string]string{"BATON_RECOVER_QUORUM": "true", "BATON_YES": "true"}, args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2"},
			want: agentConfig{ID: "n1", DataDir: "/d", RaftAddr: "127.0.0.1:1", GRPCAddr: "127.0.0.1:2"}},
		{name: "yes alone", args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--yes"}, err: "--yes confirms --recover-quorum"},
		{name: "recover quorum with dev", args: []string{"--dev", "--recover-quorum"}, err: "not --dev's single node"},
		{name: "recover quorum with join", args: []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--join", "127.0.0.1:3", "--recover-quorum"},
			err: "drop --join"},
		{name: "every problem named", args: []string{"--raft-addr", "0.0.0.0:1"}, err: "single-node cluster)\n  --data-dir is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAgentFlags(tc.args, func(k string) string { return tc.env[k] }, io.Discard, io.Discard)
			if usageErrorCase(t, err, tc.err) {
				return
			}
			got.TLSFrom = tlsSources{} // TestServerTLSVariables checks it
			if tc.want.ChangeRate == 0 && tc.want.ChangeBurst == 0 {
				tc.want.ChangeRate, tc.want.ChangeBurst = admin.DefaultChangeRate, admin.DefaultChangeBurst
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestAgentExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"agent", "--nope"}, 2},
		{[]string{"agent"}, 2},
		{[]string{"agent", "-h"}, 0},
		{[]string{"agent", "--id", "a", "--data-dir", "d", "--raft-addr", "0.0.0.0:1", "--grpc-addr", "h:2"}, 2},
	} {
		code, stdout, stderr := runCLI(t, nil, tc.args...)
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d; stderr: %s", tc.args, code, tc.code, stderr)
		}
		// Help asked for is on stdout; any mistake is said on stderr.
		if said := map[bool]string{true: stdout, false: stderr}[tc.code == 0]; said == "" {
			t.Errorf("%v: exit %d and nothing said on %s", tc.args, code, map[bool]string{true: "stdout", false: "stderr"}[tc.code == 0])
		}
	}
}

// The Raft timing flags: explicit timings win over --raft-multiplier,
// which scales the defaults; the lease never exceeds the heartbeat
// timeout; and the values reach the cluster configuration the agent
// builds (cluster's own test checks they reach raft's).
func TestAgentRaftTimingFlags(t *testing.T) {
	dev := []string{"--dev"}
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		file string // --config contents
		want raftTimings
		err  string
	}{
		{name: "none: cluster's defaults", args: dev},
		{name: "multiplier scales the defaults", args: append([]string{"--raft-multiplier", "3"}, dev...),
			want: raftTimings{HeartbeatTimeout: 900 * ms, ElectionTimeout: 900 * ms, LeaderLease: 900 * ms}},
		{name: "explicit timings win over the multiplier", args: append([]string{"--raft-multiplier", "2", "--raft-heartbeat-timeout", "500ms", "--raft-leader-lease", "450ms"}, dev...),
			want: raftTimings{HeartbeatTimeout: 500 * ms, ElectionTimeout: 600 * ms, LeaderLease: 450 * ms}},
		{name: "a lower heartbeat takes the lease down", args: append([]string{"--raft-heartbeat-timeout", "200ms"}, dev...),
			want: raftTimings{HeartbeatTimeout: 200 * ms, ElectionTimeout: 300 * ms, LeaderLease: 200 * ms}},
		{name: "from the environment", env: map[string]string{"BATON_RAFT_ELECTION_TIMEOUT": "1s", "BATON_RAFT_MULTIPLIER": "2"}, args: dev,
			want: raftTimings{HeartbeatTimeout: 600 * ms, ElectionTimeout: time.Second, LeaderLease: 600 * ms}},
		{name: "from the config file", file: `{"raft_heartbeat_timeout": "400ms", "raft-leader-lease": "400ms", "dev": true}`,
			want: raftTimings{HeartbeatTimeout: 400 * ms, ElectionTimeout: 300 * ms, LeaderLease: 400 * ms}},
		{name: "lease over heartbeat", args: append([]string{"--raft-leader-lease", "1s"}, dev...), err: "--raft-leader-lease 1s exceeds the heartbeat timeout 300ms"},
		{name: "lease over scaled heartbeat", args: append([]string{"--raft-multiplier", "2", "--raft-leader-lease", "700ms"}, dev...), err: "exceeds the heartbeat timeout 600ms"},
		{name: "not a duration", args: append([]string{"--raft-election-timeout", "300"}, dev...), err: `--raft-election-timeout "300": want a duration in 5ms..1m0s`},
		{name: "below raft's minimum", args: append([]string{"--raft-heartbeat-timeout", "1ms"}, dev...), err: "--raft-heartbeat-timeout"},
		{name: "multiplier out of range", args: append([]string{"--raft-multiplier", "0"}, dev...), err: `--raft-multiplier "0": want a whole number in 1..10`},
		{name: "multiplier not whole", env: map[string]string{"BATON_RAFT_MULTIPLIER": "1.5"}, args: dev, err: "--raft-multiplier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				p := filepath.Join(t.TempDir(), "agent.json")
				if err := os.WriteFile(p, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append([]string{"--config", p}, args...)
			}
			got, err := parseAgentFlags(args, func(k string) string { return tc.env[k] }, io.Discard, io.Discard)
			if usageErrorCase(t, err, tc.err) {
				return
			}
			if got.Raft != tc.want {
				t.Fatalf("timings %+v, want %+v", got.Raft, tc.want)
			}
			c := cluster.DefaultConfig()
			got.Raft.apply(&c)
			want := tc.want
			if want == (raftTimings{}) {
				want = raftTimings{cluster.DefaultHeartbeatTimeout, cluster.DefaultElectionTimeout, cluster.DefaultLeaderLeaseTimeout}
			}
			if have := (raftTimings{c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout}); have != want {
				t.Fatalf("cluster config timings %+v, want %+v", have, want)
			}
		})
	}
}

// A bad Raft timing is a usage error: exit 2, the problem on stderr.
func TestAgentRaftTimingUsageExit(t *testing.T) {
	code, stdout, stderr := runCLI(t, nil, "agent", "--dev", "--raft-heartbeat-timeout", "200ms", "--raft-leader-lease", "250ms")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "--raft-leader-lease 250ms exceeds the heartbeat timeout 200ms") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and the lease named", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, nil, "agent", "-h")
	for _, f := range []string{"-raft-heartbeat-timeout", "-raft-election-timeout", "-raft-leader-lease", "-raft-multiplier", "BATON_RAFT_MULTIPLIER"} {
		if code != 0 || !strings.Contains(stdout, f) {
			t.Errorf("agent -h: exit %d, %s not in the help", code, f)
		}
	}
}

// TestClusterSecretAndBootstrapTTLFlags: the cluster secret comes from
// --cluster-secret, its variable, or a file; it is for plaintext only and
// must be long enough. The bootstrap token's TTL is a duration of a minute
// or more.
func TestClusterSecretAndBootstrapTTLFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("  from-a-file-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dev := agentConfig{ID: "dev", DataDir: "./baton-data", RaftAddr: "127.0.0.1:7071", GRPCAddr: "127.0.0.1:7070", HTTPAddr: "127.0.0.1:7072", Dev: true, DevRegionServers: 3,
		Peers: []cluster.Peer{{ID: "dev", Address: "127.0.0.1:7071"}}, ChangeRate: admin.DefaultChangeRate, ChangeBurst: admin.DefaultChangeBurst}
	with := func(f func(*agentConfig)) agentConfig { c := dev; f(&c); return c }
	tlsArgs := []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "m1:1", "--grpc-addr", "m1:2", "--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want agentConfig
		err  string
	}{
		{name: "inline", args: []string{"--dev", "--cluster-secret", "0123456789abcdef"}, want: with(func(c *agentConfig) { c.ClusterSecret = "0123456789abcdef" })},
		{name: "env", env: map[string]string{"BATON_CLUSTER_SECRET": "fedcba9876543210"}, args: []string{"--dev"}, want: with(func(c *agentConfig) { c.ClusterSecret = "fedcba9876543210" })},
		{name: "file", args: []string{"--dev", "--cluster-secret-file", file}, want: with(func(c *agentConfig) { c.ClusterSecret = "from-a-file-0123456789" })},
		{name: "file from env", env: map[string]string{"BATON_CLUSTER_SECRET_FILE": file}, args: []string{"--dev"}, want: with(func(c *agentConfig) { c.ClusterSecret = "from-a-file-0123456789" })},
		{name: "both", args: []string{"--dev", "--cluster-secret", "0123456789abcdef", "--cluster-secret-file", file}, err: "not both"},
		{name: "short", args: []string{"--dev", "--cluster-secret", "hunter2"}, err: "--cluster-secret: 7 characters; want at least 16"},
		{name: "missing file", args: []string{"--dev", "--cluster-secret-file", file + ".nope"}, err: "--cluster-secret-file: open"},
		{name: "with TLS", args: append([]string{"--cluster-secret", "0123456789abcdef"}, tlsArgs...), err: "--cluster-secret is for clusters without TLS"},
		{name: "bootstrap ttl", args: []string{"--dev", "--acl-bootstrap-token-ttl", "24h"}, want: with(func(c *agentConfig) { c.ACLBootstrapTokenTTL = 24 * time.Hour })},
		{name: "short bootstrap ttl", args: []string{"--dev", "--acl-bootstrap-token-ttl", "5s"}, err: "--acl-bootstrap-token-ttl \"5s\": want a duration of at least 1m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAgentFlags(tc.args, func(k string) string { return tc.env[k] }, io.Discard, io.Discard)
			if usageErrorCase(t, err, tc.err) {
				return
			}
			got.TLSFrom = tlsSources{}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestBootstrapTokenFileFlag: --acl-bootstrap-token-file (or its
// variable) gives the bootstrap token from a private file; a missing,
// public, malformed or weak one is refused, and no message quotes it; it
// needs access control on.
func TestBootstrapTokenFileFlag(t *testing.T) {
	const tok = "bt_0123456789abcdef_Zq3xV9mK2pL7wR4tY8uN1bC6dF0gH5jS-_aEiOoUyTq"
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	good := write("good", tok+"\n", 0o600)
	groupRead := write("group", tok, 0o440)
	public := write("public", tok, 0o644)
	weak := write("weak", "bt_0123456789abcdef_"+strings.Repeat("ab", 21)+"c", 0o600)
	malformed := write("malformed", "hunter2hunter2hunter2", 0o600)
	tlsArgs := []string{"--id", "n1", "--data-dir", "/d", "--raft-addr", "m1:1", "--grpc-addr", "m1:2", "--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		err  string
	}{
		{name: "file", args: append([]string{"--acl-bootstrap-token-file", good}, tlsArgs...)},
		{name: "env", env: map[string]string{"BATON_ACL_BOOTSTRAP_TOKEN_FILE": good}, args: tlsArgs},
		{name: "group-readable (a Secret volume with fsGroup)", args: append([]string{"--acl-bootstrap-token-file", groupRead}, tlsArgs...)},
		{name: "missing", args: append([]string{"--acl-bootstrap-token-file", good + ".nope"}, tlsArgs...), err: "--acl-bootstrap-token-file: stat"},
		{name: "public", args: append([]string{"--acl-bootstrap-token-file", public}, tlsArgs...), err: "has mode 0644: an admin's secret must not be readable by others"},
		{name: "weak", args: append([]string{"--acl-bootstrap-token-file", weak}, tlsArgs...), err: "distinct characters, want at least 16: it is not random"},
		{name: "malformed", args: append([]string{"--acl-bootstrap-token-file", malformed}, tlsArgs...), err: "not a baton token (want bt_<16 hex digits>_<43 base64url characters>)"},
		{name: "acl off", args: append([]string{"--acl", "off", "--acl-bootstrap-token-file", good}, tlsArgs...), err: "--acl-bootstrap-token-file needs --acl on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut strings.Builder
			got, err := parseAgentFlags(tc.args, func(k string) string { return tc.env[k] }, &out, &errOut)
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			for _, s := range []string{msg, out.String(), errOut.String()} {
				if strings.Contains(s, "Zq3xV9mK2pL7wR4t") || strings.Contains(s, "ababab") || strings.Contains(s, "hunter2") {
					t.Fatalf("a message quotes the file's token: %s", s)
				}
			}
			if usageErrorCase(t, err, tc.err) {
				return
			}
			if got.ACLBootstrapToken != tok {
				t.Fatalf("token %q, want the file's", got.ACLBootstrapToken)
			}
		})
	}
}
