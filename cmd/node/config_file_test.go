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

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "baton.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAgentConfigFile: a --config file (or BATON_CONFIG) supplies flag
// values; an environment variable wins over it, a flag over both; bad
// files are usage errors naming the problem.
func TestAgentConfigFile(t *testing.T) {
	conf := writeConfig(t, `{"id": "n1", "data_dir": "/d", "raft-addr": "10.0.0.1:1", "grpc-addr": "10.0.0.1:2",
		"tls-ca": "ca.pem", "tls-cert": "c.pem", "tls-key": "k.pem", "workers": 128, "submit-rate": 2.5, "client-auth": "either"}`)
	env := map[string]string{"BATON_AGENT_TLS_KEY": "env-key.pem"}
	got, err := parseAgentFlags([]string{"--config", conf, "--workers", "64"}, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := security.Files{CA: "ca.pem", Cert: "c.pem", Key: "env-key.pem"}
	if got.ID != "n1" || got.DataDir != "/d" || got.RaftAddr != "10.0.0.1:1" || got.TLS != want || got.Workers != 64 || got.SubmitRate != 2.5 || got.ClientAuth != security.ClientAuthEither {
		t.Fatalf("got %+v", got)
	}
	// BATON_CONFIG names the file when --config does not.
	env2 := map[string]string{"BATON_CONFIG": conf}
	if got, err := parseAgentFlags(nil, func(k string) string { return env2[k] }, io.Discard, io.Discard); err != nil || got.Workers != 128 || got.TLS.Key != "k.pem" {
		t.Fatalf("from BATON_CONFIG: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		body, want string
	}{
		{`{"id": "n1", "nope": 1}`, `unknown key "nope"`},
		// A one-shot operator action, never how the agent starts.
		{`{"id": "n1", "recover-quorum": true}`, `unknown key "recover-quorum"`},
		{`{"id": "n1", "yes": true}`, `unknown key "yes"`},
		{`{"id": {"a": 1}}`, `"id": want a string, a number or a boolean`},
		{`[1, 2]`, "not a JSON object"},
		{`{"id": `, "not a JSON object"},
		{`{"id": "x", "id": "y"}`, `key "id" given twice`},
		{`{"tls-cert": "a.pem", "tls_cert": "b.pem"}`, "both set --tls-cert"},
		{`{"id": "x"} trailing`, "something follows the object"},
	} {
		p := writeConfig(t, tc.body)
		if _, err := parseAgentFlags([]string{"--config=" + p}, func(string) string { return "" }, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.body, err, tc.want)
		}
	}
	if _, err := parseAgentFlags([]string{"--config", filepath.Join(t.TempDir(), "missing.json")}, func(string) string { return "" }, io.Discard, io.Discard); err == nil {
		t.Error("a missing --config file: no error")
	}
	if _, err := parseAgentFlags([]string{"--config", t.TempDir()}, func(string) string { return "" }, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("a directory as --config: %v", err)
	}
	// The last --config wins, as for any flag; an empty one turns
	// BATON_CONFIG off.
	other := writeConfig(t, `{"id": "n9", "data-dir": "/d", "raft-addr": "127.0.0.1:1", "grpc-addr": "127.0.0.1:2"}`)
	if got, err := parseAgentFlags([]string{"--config", conf, "--config", other}, func(string) string { return "" }, io.Discard, io.Discard); err != nil || got.ID != "n9" {
		t.Errorf("two --config: id %q, %v; want the last file's n9", got.ID, err)
	}
	if got, err := parseAgentFlags([]string{"--config=", "--dev"}, func(k string) string { return env2[k] }, io.Discard, io.Discard); err != nil || got.Workers != 0 {
		t.Errorf("--config= with BATON_CONFIG set: workers %d, %v; want the file ignored", got.Workers, err)
	}
	// The region server reads one too.
	rsConf := writeConfig(t, `{"id": "rs1", "grpc_addr": "127.0.0.1:5", "masters": "127.0.0.1:6", "op-latency": "5ms"}`)
	cfg, _, err := parseRegionServerFlags([]string{"--config", rsConf}, func(string) string { return "" }, io.Discard, io.Discard)
	if err != nil || cfg.ID != "rs1" || cfg.GRPCAddr != "127.0.0.1:5" || len(cfg.Masters) != 1 || cfg.OpLatency.Milliseconds() != 5 {
		t.Fatalf("region server from --config: %+v, %v", cfg, err)
	}
}

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
