package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster/clustertest"
)

// TestGitignoreKeepsKeysOut: the README's development CA (tls/, holding
// the CA's key) and the --dev agent's data are not offered to git add.
func TestGitignoreKeepsKeysOut(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skip("not a git checkout")
	}
	for _, p := range []string{"tls/baton-ca-key.pem", "tls/baton-ca.pem", "baton-data/fsm/x", "docker/tls/client-operator-key.pem", "elsewhere/master-n1-key.pem"} {
		if out, err := exec.Command(git, "-C", root, "check-ignore", "-q", "--no-index", p).CombinedOutput(); err != nil {
			t.Errorf("%s is not ignored: %v %s", p, err, out)
		}
	}
}

// TestOperatorsMessages: what the lock, cancel and flag paths say, and
// the help of the servers' flags.
func TestOperatorsMessages(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{Masters: 1})
	env := map[string]string{"BATON_ADDR": strings.Join(fc.AdminAddrs(), ",")}

	t.Run("keepalive says a rounded interval", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "lock", "acquire", "--kind", "namespace", "--name", "ns", "--lease", "5s", "--", "true")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if !strings.Contains(stdout+stderr, "renewing its lease (5s) every 1.667s;") {
			t.Errorf("stdout %q, stderr %q: want the interval as 1.667s", stdout, stderr)
		}
	})
	t.Run("proc cancel with nothing matching", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "proc", "cancel", "--owner", "nobody")
		if code != 0 || !strings.Contains(stdout, "no unfinished procedure matches") || strings.Contains(stderr, "--yes") {
			t.Fatalf("exit %d, stdout %q, stderr %q: want exit 0 saying nothing matches", code, stdout, stderr)
		}
		code, stdout, _ = runCLI(t, env, "proc", "cancel", "--owner", "nobody", "--json")
		var doc map[string]any
		if err := json.Unmarshal([]byte(stdout), &doc); code != 0 || err != nil || doc["exit_code"] != nil || doc["confirm"] != nil {
			t.Fatalf("exit %d, %v: %s", code, err, stdout)
		}
	})
	t.Run("proc cancel counts in the singular", func(t *testing.T) {
		if code, _, stderr := runCLI(t, env, "proc", "submit", "sleep", "--arg", "steps=2", "--arg", "delay=1h", "--owner", "nightly"); code != 0 {
			t.Fatal(stderr)
		}
		code, stdout, stderr := runCLI(t, env, "proc", "cancel", "--owner", "nightly")
		if code != exitUsage || !strings.Contains(stdout, "would cancel 1 procedure\n") {
			t.Fatalf("exit %d, %q, %q", code, stdout, stderr)
		}
		code, stdout, stderr = runCLI(t, env, "proc", "cancel", "--owner", "nightly", "--yes")
		if code != 0 || !strings.Contains(stdout, "cancelled 1 procedure\n") {
			t.Fatalf("exit %d, %q, %q", code, stdout, stderr)
		}
	})
	t.Run("a bad flag value is one line", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "table", "create", "t2", "--regions", "1e9")
		want := "baton table create: --regions \"1e9\": want a whole number\nrun 'baton table create -h' for usage\n"
		if code != exitUsage || stderr != want || stdout != "" {
			t.Fatalf("exit %d, stdout %q, stderr %q; want exactly %q", code, stdout, stderr, want)
		}
		code, _, stderr = runCLI(t, env, "proc", "list", "--nope")
		if code != exitUsage || !strings.HasPrefix(stderr, "baton proc list: unknown flag --nope\n") || strings.Contains(stderr, "flags:") {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		// Help asked for is still the whole usage, on stdout.
		if code, stdout, _ := runCLI(t, env, "table", "create", "-h"); code != 0 || !strings.Contains(stdout, "-regions int") {
			t.Fatalf("exit %d:\n%s", code, stdout)
		}
	})
	t.Run("the servers' help names their flags' types", func(t *testing.T) {
		_, stdout, _ := runCLI(t, nil, "agent", "-h")
		for _, want := range []string{"-workers int\n", "-submit-rate float\n", "-submit-burst int\n", "-audit-retention duration\n", "-audit-max-records int\n", "-dev-regionservers int\n", "-acl on|off\n"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("agent -h lacks %q", want)
			}
		}
		_, stdout, _ = runCLI(t, nil, "regionserver", "-h")
		for _, want := range []string{"-op-latency duration\n", "-failure-rate float\n", "-heartbeat-interval duration\n"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("regionserver -h lacks %q", want)
			}
		}
	})
}

// TestCallerWithoutUSER: a lock's holder and a repair's caller name the
// OS user when $USER is unset (cron, systemd, containers), else the uid;
// never "unknown".
func TestCallerWithoutUSER(t *testing.T) {
	c := &cli{getenv: func(string) string { return "" }}
	u, err := user.Current()
	if err == nil && u.Username != "" {
		if got := c.defaultHolder(); !strings.HasPrefix(got, u.Username+"@") {
			t.Errorf("holder %q, want %s@...", got, u.Username)
		}
	}
	defer func(f func() (*user.User, error)) { lookupUser = f }(lookupUser)
	lookupUser = func() (*user.User, error) { return nil, errors.New("no passwd entry") }
	if got, want := c.defaultHolder(), "uid"+strconv.Itoa(os.Getuid())+"@"; !strings.HasPrefix(got, want) {
		t.Errorf("holder %q, want %s...", got, want)
	}
	c.getenv = func(k string) string { return map[string]string{"USER": "ann"}[k] }
	if got := c.defaultHolder(); !strings.HasPrefix(got, "ann@") {
		t.Errorf("holder %q, want ann@...", got)
	}
}
