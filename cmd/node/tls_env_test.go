package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-dev/baton/security"
)

// TestServerTLSVariables: the client commands' BATON_TLS_* (which the
// README has operators export) are not the servers': an agent or region
// server started from that shell takes its own files (flags,
// BATON_AGENT_TLS_* / BATON_RS_TLS_*, its --config file), and every
// message about a bad file names where it came from.
func TestServerTLSVariables(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"tls", "ca", "create", "--dir", dir},
		{"tls", "cert", "create", "--role", "master", "--id", "n5", "--dir", dir},
		{"tls", "cert", "create", "--role", "regionserver", "--id", "rs1", "--dir", dir},
		{"tls", "cert", "create", "--role", "client", "--id", "admin", "--dir", dir},
	} {
		if code, _, stderr := runCLI(t, nil, args...); code != exitOK {
			t.Fatalf("%v: %s", args, stderr)
		}
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	ca := p("baton-ca.pem")
	master := security.Files{CA: ca, Cert: p("master-n5.pem"), Key: p("master-n5-key.pem")}
	rs := security.Files{CA: ca, Cert: p("regionserver-rs1.pem"), Key: p("regionserver-rs1-key.pem")}
	clientEnv := map[string]string{"BATON_TLS_CA": ca, "BATON_TLS_CERT": p("client-admin.pem"), "BATON_TLS_KEY": p("client-admin-key.pem")}
	getenv := func(env map[string]string) func(string) string { return func(k string) string { return env[k] } }
	n5 := filepath.Join(dir, "n5.json")
	if err := os.WriteFile(n5, []byte(`{"id": "n5", "data-dir": "`+t.TempDir()+`", "raft-addr": "127.0.0.1:1", "grpc-addr": "127.0.0.1:2",
		"tls-ca": "`+master.CA+`", "tls-cert": "`+master.Cert+`", "tls-key": "`+master.Key+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("the README's shell: agent --config with the client's variables exported", func(t *testing.T) {
		var stderr bytes.Buffer
		cfg, err := parseAgentFlags([]string{"--config", n5}, getenv(clientEnv), io.Discard, &stderr)
		if err != nil || cfg.TLS != master {
			t.Fatalf("%+v, %v; want the file's TLS files %+v", cfg.TLS, err, master)
		}
		if stderr.Len() != 0 {
			t.Errorf("stderr: %s", stderr.String())
		}
		if want := (tlsSources{CA: n5 + `'s "tls-ca"`, Cert: n5 + `'s "tls-cert"`, Key: n5 + `'s "tls-key"`}); cfg.TLSFrom != want {
			t.Errorf("sources %+v, want %+v", cfg.TLSFrom, want)
		}
	})
	t.Run("agent --dev with the client's variables exported", func(t *testing.T) {
		cfg, err := parseAgentFlags([]string{"--dev"}, getenv(clientEnv), io.Discard, io.Discard)
		if err != nil || cfg.TLS.Enabled() {
			t.Fatalf("%+v, %v; want plaintext", cfg.TLS, err)
		}
	})
	t.Run("a plaintext agent leaves a client's certificate to the client, silently", func(t *testing.T) {
		var stderr bytes.Buffer
		cfg, err := parseAgentFlags([]string{"--id", "n5", "--data-dir", "/d", "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2"}, getenv(clientEnv), io.Discard, &stderr)
		if err != nil || cfg.TLS.Enabled() || stderr.Len() != 0 {
			t.Fatalf("%+v, %v, stderr %q; want plaintext and nothing said", cfg.TLS, err, stderr.String())
		}
	})
	t.Run("the agent's own variables", func(t *testing.T) {
		env := map[string]string{"BATON_AGENT_TLS_CA": master.CA, "BATON_AGENT_TLS_CERT": master.Cert, "BATON_AGENT_TLS_KEY": master.Key}
		for k, v := range clientEnv {
			env[k] = v
		}
		cfg, err := parseAgentFlags([]string{"--id", "n5", "--data-dir", "/d", "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2"}, getenv(env), io.Discard, io.Discard)
		if err != nil || cfg.TLS != master || cfg.TLSFrom.Cert != "env BATON_AGENT_TLS_CERT" {
			t.Fatalf("%+v from %+v, %v", cfg.TLS, cfg.TLSFrom, err)
		}
	})
	t.Run("deprecated: a master's certificate in BATON_TLS_* still serves, with a warning", func(t *testing.T) {
		env := map[string]string{"BATON_TLS_CA": master.CA, "BATON_TLS_CERT": master.Cert, "BATON_TLS_KEY": master.Key}
		var stderr bytes.Buffer
		cfg, err := parseAgentFlags([]string{"--id", "n5", "--data-dir", "/d", "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2"}, getenv(env), io.Discard, &stderr)
		if err != nil || cfg.TLS != master || !cfg.ACL {
			t.Fatalf("%+v, acl %v, %v; want the master's files and access control on", cfg.TLS, cfg.ACL, err)
		}
		if !strings.Contains(stderr.String(), "deprecated") || !strings.Contains(stderr.String(), "BATON_AGENT_TLS_CA, BATON_AGENT_TLS_CERT and BATON_AGENT_TLS_KEY") {
			t.Errorf("stderr %q: want a deprecation warning naming the agent's variables", stderr.String())
		}
		// A region server's certificate there is not the agent's.
		env = map[string]string{"BATON_TLS_CA": rs.CA, "BATON_TLS_CERT": rs.Cert, "BATON_TLS_KEY": rs.Key}
		stderr.Reset()
		cfg, err = parseAgentFlags([]string{"--id", "n5", "--data-dir", "/d", "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2"}, getenv(env), io.Discard, &stderr)
		if err != nil || cfg.TLS.Enabled() || !strings.Contains(stderr.String(), "ignoring") {
			t.Fatalf("%+v, %v, stderr %q; want the files ignored, saying so", cfg.TLS, err, stderr.String())
		}
		// And the region server takes its own the same way.
		stderr.Reset()
		_, tr, err := parseRegionServerFlags([]string{"--id", "rs1", "--grpc-addr", "127.0.0.1:3", "--masters", "127.0.0.1:2"}, getenv(env), io.Discard, &stderr)
		if err != nil || tr.TLS != rs || !strings.Contains(stderr.String(), "BATON_RS_TLS_CERT") {
			t.Fatalf("%+v, %v, stderr %q", tr.TLS, err, stderr.String())
		}
	})
	t.Run("regionserver -h shows no client's file", func(t *testing.T) {
		code, stdout, _ := runCLI(t, clientEnv, "regionserver", "-h")
		if code != exitOK || strings.Contains(stdout, "client-admin") || !strings.Contains(stdout, "BATON_RS_TLS_CERT") {
			t.Fatalf("exit %d:\n%s", code, stdout)
		}
		code, stdout, _ = runCLI(t, clientEnv, "agent", "-h")
		if code != exitOK || strings.Contains(stdout, "client-admin") || !strings.Contains(stdout, "BATON_AGENT_TLS_CERT") {
			t.Fatalf("exit %d:\n%s", code, stdout)
		}
	})
	t.Run("each message names the source", func(t *testing.T) {
		agent := []string{"agent", "--id", "n5", "--data-dir", t.TempDir(), "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--http-addr", ""}
		bad := filepath.Join(dir, "nope.pem")
		badConf := filepath.Join(dir, "bad.json")
		if err := os.WriteFile(badConf, []byte(`{"tls-ca": "`+ca+`", "tls-cert": "`+bad+`", "tls-key": "`+master.Key+`"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			env  map[string]string
			args []string
			want string
		}{
			{map[string]string{"BATON_AGENT_TLS_CA": ca, "BATON_AGENT_TLS_CERT": bad, "BATON_AGENT_TLS_KEY": master.Key}, agent, "from env BATON_AGENT_TLS_CERT"},
			{nil, append(append([]string{}, agent...), "--config", badConf), `from ` + badConf + `'s "tls-cert"`},
			{nil, append(append([]string{}, agent...), "--tls-ca", ca, "--tls-cert", bad, "--tls-key", master.Key), "from --tls-cert"},
			{map[string]string{"BATON_AGENT_TLS_CA": ca, "BATON_AGENT_TLS_CERT": rs.Cert, "BATON_AGENT_TLS_KEY": rs.Key}, agent,
				"but this process runs as baton://master/n5 (--tls-cert " + rs.Cert + ", from env BATON_AGENT_TLS_CERT)"},
			{map[string]string{"BATON_AGENT_TLS_CERT": master.Cert}, agent, "given " + master.Cert + " (from env BATON_AGENT_TLS_CERT); missing --tls-ca (or env BATON_AGENT_TLS_CA)"},
			{map[string]string{"BATON_RS_TLS_CA": ca, "BATON_RS_TLS_CERT": bad, "BATON_RS_TLS_KEY": rs.Key},
				[]string{"regionserver", "--id", "rs1", "--grpc-addr", "127.0.0.1:3", "--masters", "127.0.0.1:2"}, "from env BATON_RS_TLS_CERT"},
			{map[string]string{"BATON_TLS_CA": ca, "BATON_TLS_CERT": bad, "BATON_TLS_KEY": master.Key}, []string{"table", "list"}, "from env BATON_TLS_CERT"},
			{nil, []string{"table", "list", "--tls-ca", ca, "--tls-cert", bad, "--tls-key", master.Key}, "from --tls-cert"},
			{map[string]string{"BATON_TLS_KEY": master.Key}, []string{"table", "list"}, "given " + master.Key + " (from env BATON_TLS_KEY); missing --tls-ca (or env BATON_TLS_CA), --tls-cert (or env BATON_TLS_CERT)"},
		} {
			if code, _, stderr := runCLI(t, tc.env, tc.args...); code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("%v %v: exit %d, %q; want exit 2 saying %q", tc.env, tc.args, code, stderr, tc.want)
			}
		}
	})
}
