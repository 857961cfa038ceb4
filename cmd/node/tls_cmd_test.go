package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-dev/baton/security"
)

func TestTLSCreateCommands(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := runCLI(t, nil, "tls", "ca", "create", "--dir", dir)
	if code != exitOK {
		t.Fatalf("ca create: exit %d: %s", code, stderr)
	}
	ca, caKey := filepath.Join(dir, "baton-ca.pem"), filepath.Join(dir, "baton-ca-key.pem")
	if code, _, stderr := runCLI(t, nil, "tls", "cert", "create", "--role", "client", "--id", "x", "--dir", dir); code != exitOK {
		t.Errorf("cert create with the CA in --dir: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "tls", "ca", "create", "--dir", dir); code != exitFailed || !strings.Contains(stderr, "--force") {
		t.Errorf("ca create over an existing CA: exit %d, %q; want exit 1 naming --force", code, stderr)
	}
	for _, role := range []string{"master", "regionserver", "client"} {
		code, stdout, stderr := runCLI(t, nil, "tls", "cert", "create", "--role", role, "--id", "n1", "--ca", ca, "--ca-key", caKey, "--dir", dir, "--json")
		if code != exitOK {
			t.Fatalf("cert create %s: exit %d: %s", role, code, stderr)
		}
		var doc struct {
			Identity string `json:"identity"`
			CertFile string `json:"cert_file"`
			KeyFile  string `json:"key_file"`
			NotAfter string `json:"not_after"`
		}
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatalf("--json: %v: %q", err, stdout)
		}
		if doc.Identity != "baton://"+role+"/n1" || doc.NotAfter == "" {
			t.Errorf("%s: %+v", role, doc)
		}
		for _, f := range []string{doc.CertFile, doc.KeyFile} {
			info, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v, want 0600", f, info.Mode().Perm())
			}
		}
		c, err := security.Load(security.Files{CA: ca, Cert: doc.CertFile, Key: doc.KeyFile}, nil, nil)
		if err != nil {
			t.Fatalf("%s: the files do not load: %v", role, err)
		}
		if got := c.Identity(); got.String() != doc.Identity {
			t.Errorf("loaded %s, want %s", got, doc.Identity)
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--role", "admin", "--id", "x"}, exitUsage, "role"},
		{[]string{"--role", "master"}, exitUsage, "--id"},
		{[]string{"--role", "master", "--id", "../etc"}, exitUsage, "id"},
		{[]string{"--role", "master", "--id", "n2", "--days", "0"}, exitUsage, "--days"},
		{[]string{"--role", "master", "--id", "n2", "extra"}, exitUsage, "unexpected argument"},
		{[]string{"--role", "master", "--id", "n2", "--ca", filepath.Join(dir, "nope.pem")}, exitFailed, "baton tls ca create"},
		{[]string{"--role", "master", "--id", "n2", "--ca", ca, "--ca-key", filepath.Join(dir, "master-n1-key.pem")}, exitFailed, "not the key"},
		{[]string{"--role", "master", "--id", "n1", "--ca", ca, "--ca-key", caKey, "--dir", dir}, exitFailed, "--force"},
		{[]string{"--role", "master", "--id", "n1", "--dir", dir}, exitFailed, "--force"}, // the CA found in --dir
	} {
		args := append([]string{"tls", "cert", "create"}, tc.args...)
		if !strings.Contains(strings.Join(tc.args, " "), "--dir") {
			args = append(args, "--dir", t.TempDir())
		}
		if code, _, stderr := runCLI(t, nil, args...); code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, %q; want exit %d naming %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

// TestBadTLSFilesAreBadUsage: an agent or region server given TLS files it
// cannot use (missing, or a certificate naming another process) exits 2
// naming the problem, before starting anything.
func TestBadTLSFilesAreBadUsage(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := runCLI(t, nil, "tls", "ca", "create", "--dir", dir); code != exitOK {
		t.Fatal(stderr)
	}
	if code, _, stderr := runCLI(t, nil, "tls", "cert", "create", "--role", "master", "--id", "n1", "--dir", dir); code != exitOK {
		t.Fatal(stderr)
	}
	ca, cert, key := filepath.Join(dir, "baton-ca.pem"), filepath.Join(dir, "master-n1.pem"), filepath.Join(dir, "master-n1-key.pem")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"agent", "--id", "n2", "--data-dir", t.TempDir(), "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--http-addr", "",
			"--tls-ca", ca, "--tls-cert", cert, "--tls-key", key}, "names baton://master/n1, but this process runs as baton://master/n2"},
		{[]string{"agent", "--id", "n1", "--data-dir", t.TempDir(), "--raft-addr", "127.0.0.1:1", "--grpc-addr", "127.0.0.1:2", "--http-addr", "",
			"--tls-ca", ca, "--tls-cert", cert + ".missing", "--tls-key", key}, "no such file"},
		{[]string{"regionserver", "--id", "n1", "--grpc-addr", "127.0.0.1:3", "--masters", "127.0.0.1:2",
			"--tls-ca", ca, "--tls-cert", cert, "--tls-key", key}, "but this process runs as baton://regionserver/n1"},
	} {
		if code, _, stderr := runCLI(t, nil, tc.args...); code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 naming %q", tc.args[0], code, stderr, tc.want)
		}
	}
}
