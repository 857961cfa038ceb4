package main

import (
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
