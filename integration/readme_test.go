package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/security"
)

// TestReadme runs README.md's ```sh blocks, so that the README cannot
// drift from the product: each command line runs in one bash per
// environment (the Quickstart's dev agent, the three-node cluster) and its
// exit code and output are checked against what the README's comment on
// that line promises. A failure names the README line.
//
// The README's ports are fixed (7070.., 8100..); the test shifts every
// port by one random offset (same offset for all, so the addresses stay
// consistent) so that it can run beside other clusters on the machine.
// BATON_README_PORT_OFFSET=0 runs the README's literal ports.
func TestReadme(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts four agents and three region servers")
	}
	blocks, err := parseReadme("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	offset := readmePortOffset(t, blocks)

	// Every block must be claimed by a step (or skipped with a reason), so
	// a new README block cannot go unchecked.
	envs := map[string][]shBlock{}
	var order []string
	for _, b := range blocks {
		step, ok := readmeSteps[b.heading]
		if !ok {
			t.Errorf("README.md:%d: ```sh block under %q is not mapped to a step of TestReadme (add its heading to readmeSteps)", b.line, b.heading)
			continue
		}
		if step.skip != "" {
			t.Logf("README.md:%d: block under %q not run: %s", b.line, b.heading, step.skip)
			continue
		}
		if _, seen := envs[step.env]; !seen {
			order = append(order, step.env)
		}
		envs[step.env] = append(envs[step.env], b)
	}
	for _, env := range order {
		t.Run(env, func(t *testing.T) {
			s := newReadmeShell(t, env, offset)
			for _, b := range envs[env] {
				for _, c := range b.cmds {
					if !s.run(c) {
						return // later lines depend on this one
					}
				}
			}
		})
	}
}

// readmeStep says how the blocks under one README heading run. Blocks of
// the same env share one bash (variables, background processes): the
// region-server block needs the masters the three-node block started.
type readmeStep struct {
	env  string
	skip string // why the block is not run here
}

var readmeSteps = map[string]readmeStep{
	"Quickstart":                           {env: "dev"},
	"Reads and what they guarantee":        {env: "dev"},
	"A three-node cluster on one machine":  {env: "cluster"},
	"Tables and regions on region servers": {env: "cluster"},
	"Repair kit":                           {env: "dev"},
	"The failover demos":                   {skip: "make targets; TestDemoLocal and TestComposeFailoverDemo run their scripts"},
}

// readmePending lists README command lines that do not work yet because
// the work they document is unfinished, with the reason. Such a line still
// runs; if it fails, the test skips the rest of its environment naming the
// line and the reason, and if it passes, the test fails so the entry is
// removed. Keys are the command as written in the README (without its
// comment).
var readmePending = map[string]string{}

// readmeIllustrative are JSON keys whose values in a README comment are
// examples (which master answered, how many writes came before), so only
// their presence and type are checked.
var readmeIllustrative = map[string]bool{"served_by": true, "applied_index": true}

// readmeLineTimeout bounds one command; the slowest README line (a table
// of 8 regions created and deleted on a loaded machine) takes a few seconds.
const readmeLineTimeout = 30 * time.Second

type shBlock struct {
	heading string
	line    int // README line of the opening fence
	cmds    []shCmd
}

type shCmd struct {
	line    int    // README line
	text    string // as written, comment included
	command string // without the comment
	comment string
}

func parseReadme(path string) ([]shBlock, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var (
		blocks  []shBlock
		heading string
		cur     *shBlock
		fenced  bool // inside any fence (a # in a go block is not a heading)
	)
	for i, l := range strings.Split(string(b), "\n") {
		n := i + 1
		switch {
		case cur != nil && strings.TrimSpace(l) == "```":
			blocks = append(blocks, *cur)
			cur, fenced = nil, false
		case cur != nil:
			if strings.TrimSpace(l) == "" {
				continue
			}
			if k := len(cur.cmds) - 1; k >= 0 && strings.HasSuffix(cur.cmds[k].command, `\`) {
				return nil, fmt.Errorf("README.md:%d: continued lines are not supported by TestReadme", n)
			}
			cmd, comment := splitComment(l)
			cur.cmds = append(cur.cmds, shCmd{line: n, text: l, command: cmd, comment: comment})
		case strings.HasPrefix(l, "```"):
			if fenced {
				fenced = false
			} else if lang := strings.TrimSpace(strings.TrimPrefix(l, "```")); lang == "sh" || lang == "bash" || lang == "shell" {
				cur = &shBlock{heading: heading, line: n}
			} else {
				fenced = true
			}
		case !fenced && strings.HasPrefix(l, "#"):
			heading = strings.TrimSpace(strings.TrimLeft(l, "#"))
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("README.md:%d: unterminated ```sh block", cur.line)
	}
	return blocks, nil
}

// splitComment splits a command line at its first " #" (the README's
// commands quote no '#').
func splitComment(l string) (cmd, comment string) {
	if i := strings.Index(l, " #"); i >= 0 {
		return strings.TrimSpace(l[:i]), strings.TrimSpace(l[i+2:])
	}
	return strings.TrimSpace(l), ""
}

// portRE finds the README's addresses. A port followed by $(( is the
// prefix of a computed port (810$((i+4)): 8105..), shifted by offset/10.
var portRE = regexp.MustCompile(`(127\.0\.0\.1|localhost):(\d+)(\$\(\()?`)

func rewritePorts(s string, offset int) string {
	return portRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := portRE.FindStringSubmatch(m)
		p, _ := strconv.Atoi(sub[2])
		if sub[3] != "" {
			return fmt.Sprintf("%s:%d%s", sub[1], p+offset/10, sub[3])
		}
		return fmt.Sprintf("%s:%d", sub[1], p+offset)
	})
}

// readmePorts lists every port the README's blocks use.
func readmePorts(blocks []shBlock) []int {
	var ports []int
	for _, b := range blocks {
		if step := readmeSteps[b.heading]; step.skip != "" {
			continue
		}
		for _, c := range b.cmds {
			for _, sub := range portRE.FindAllStringSubmatch(c.command, -1) {
				p, _ := strconv.Atoi(sub[2])
				if sub[3] == "" {
					ports = append(ports, p)
					continue
				}
				for d := 0; d < 10; d++ {
					ports = append(ports, p*10+d)
				}
			}
		}
	}
	// The dev agent's defaults, which its command line does not show.
	return append(ports, 7070, 7071, 7072)
}

// readmePortOffset picks a multiple of 10 (so computed ports shift too)
// under which every README port is free.
func readmePortOffset(t *testing.T, blocks []shBlock) int {
	ports := readmePorts(blocks)
	free := func(off int) bool {
		for _, p := range ports {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+off))
			if err != nil {
				return false
			}
			l.Close()
		}
		return true
	}
	if v := os.Getenv("BATON_README_PORT_OFFSET"); v != "" {
		off, err := strconv.Atoi(v)
		if err != nil || off%10 != 0 {
			t.Fatalf("BATON_README_PORT_OFFSET=%q: want a multiple of 10", v)
		}
		if !free(off) {
			t.Skipf("README ports shifted by %d are not all free (in use by another cluster?)", off)
		}
		return off
	}
	// Below 28000 + the ports: out of the kernel's ephemeral range.
	for range 50 {
		off := 10 * (100 + rand.IntN(2000))
		if free(off) {
			t.Logf("README ports shifted by %d (BATON_README_PORT_OFFSET=0: the README's own)", off)
			return off
		}
	}
	t.Skip("no port offset found under which all README ports are free")
	return 0
}

// readmeShell is one bash, fed one README line at a time, in its own
// process group so that cleanup kills whatever the lines started.
type readmeShell struct {
	t       *testing.T
	dir     string
	offset  int
	bash    *exec.Cmd
	stdin   io.Writer
	results chan string // "__RC__ n rc pids..." lines
	seq     int
	seen    map[int]bool   // background pids already handled
	agents  map[string]int // node id -> pid of the agents the lines started
	masters []string       // admin addresses of those agents
	waits   []readyWait    // what the next foreground line waits for
	// tls is the first TLS agent's material (absolute paths): the test's
	// own checks (readiness, rs list, cluster status) present it, a
	// master's certificate being admitted wherever a client's is.
	tls security.Files
}

// tlsArgs are the client flags of the test's own commands.
func (s *readmeShell) tlsArgs() []string {
	if !s.tls.Enabled() {
		return nil
	}
	return []string{"--tls-ca", s.tls.CA, "--tls-cert", s.tls.Cert, "--tls-key", s.tls.Key}
}

func newReadmeShell(t *testing.T, env string, offset int) *readmeShell {
	dir := t.TempDir()
	// ./baton in the README is the binary TestMain built.
	if err := os.Symlink(nodeBin, filepath.Join(dir, "baton")); err != nil {
		t.Fatal(err)
	}
	bash := exec.Command("bash", "--noprofile", "--norc")
	bash.Dir = dir
	bash.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATON_") {
			bash.Env = append(bash.Env, kv)
		}
	}
	switch {
	case env == "dev" && offset != 0:
		// The Quickstart relies on the default --addr; shifted, the
		// default is what BATON_ADDR overrides. That the default is the
		// README's is checked below.
		bash.Env = append(bash.Env, fmt.Sprintf("BATON_ADDR=127.0.0.1:%d", 7070+offset))
		out, _ := exec.Command(nodeBin, "proc", "list", "-h").CombinedOutput()
		if !strings.Contains(string(out), `(default "127.0.0.1:7070")`) {
			t.Errorf("the README's commands rely on --addr defaulting to 127.0.0.1:7070; baton proc list -h says:\n%s", out)
		}
	case env != "dev":
		// A line that forgets --addr must fail, not reach some other
		// cluster on the default port; nothing listens on port 1.
		bash.Env = append(bash.Env, "BATON_ADDR=127.0.0.1:1")
	}
	stdin, err := bash.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := bash.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	bash.Stderr = &stderr
	if err := bash.Start(); err != nil {
		t.Fatal(err)
	}
	s := &readmeShell{t: t, dir: dir, offset: offset, bash: bash, stdin: stdin,
		results: make(chan string, 16), seen: map[int]bool{}, agents: map[string]int{}}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "__RC__ ") {
				s.results <- l
			}
		}
		close(s.results)
	}()
	t.Cleanup(func() {
		// The whole group: bash and every agent and region server the
		// lines put in the background. t.TempDir removes the data after.
		_ = syscall.Kill(-bash.Process.Pid, syscall.SIGKILL)
		_ = bash.Wait()
		if t.Failed() {
			t.Logf("bash stderr:\n%s", stderr.String())
			logs, _ := filepath.Glob(filepath.Join(dir, "out.*"))
			for _, l := range logs {
				if b, _ := os.ReadFile(l); len(b) > 0 && strings.Contains(string(b), "baton node") {
					t.Logf("%s (tail):\n%s", filepath.Base(l), tail(b, 2000))
				}
			}
		}
	})
	return s
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

var (
	exitCodeRE = regexp.MustCompile(`exit code (\d+)`)
	capsRE     = regexp.MustCompile(`\b[A-Z][A-Z_]{2,}\b`)
	killLeader = "kill -9 <pid of the leader's agent>"
)

// run runs one README line and checks it; false means the environment
// cannot go on (the failure, or a pending line's skip, is recorded).
func (s *readmeShell) run(c shCmd) bool {
	t := s.t
	where := fmt.Sprintf("README.md:%d: %s", c.line, c.text)
	cmd := rewritePorts(c.command, s.offset)
	switch {
	case strings.HasPrefix(cmd, "go test"):
		t.Logf("%s: not run (the test suite, which this test is part of)", where)
		return true
	case strings.HasPrefix(cmd, "go run ./cmd/node agent"):
		// An agent meant for a terminal of its own: here in the
		// background, ./baton being what `go run` builds.
		cmd = "./baton " + strings.TrimPrefix(cmd, "go run ./cmd/node ")
		if s.offset != 0 && strings.Contains(cmd, "--dev") {
			cmd += fmt.Sprintf(" --grpc-addr 127.0.0.1:%d --raft-addr 127.0.0.1:%d --http-addr 127.0.0.1:%d", 7070+s.offset, 7071+s.offset, 7072+s.offset)
		}
		cmd += " &"
	case cmd == killLeader:
		s.killLeader(where)
		return true
	case strings.Contains(cmd, "<"):
		t.Errorf("%s: a placeholder TestReadme does not know how to run", where)
		return false
	}
	if !strings.HasSuffix(cmd, "&") && !strings.HasSuffix(cmd, "done") && !isAssignment(cmd) {
		if !s.ready(where) {
			return false
		}
	}

	start := time.Now()
	s.seq++
	n := s.seq
	out, errf := filepath.Join(s.dir, fmt.Sprintf("out.%d", n)), filepath.Join(s.dir, fmt.Sprintf("err.%d", n))
	// Braces, not a subshell, so assignments persist; the newline lets a
	// line end in &.
	script := fmt.Sprintf("{\n%s\n} >%s 2>%s </dev/null\n__rc=$?; echo \"__RC__ %d $__rc $(jobs -p | tr '\\n' ' ')\"\n", cmd, out, errf, n)
	if _, err := io.WriteString(s.stdin, script); err != nil {
		t.Errorf("%s: bash: %v", where, err)
		return false
	}
	var res string
	select {
	case r, ok := <-s.results:
		if !ok {
			t.Errorf("%s: bash exited", where)
			return false
		}
		res = r
	case <-time.After(readmeLineTimeout):
		o, _ := os.ReadFile(out)
		e, _ := os.ReadFile(errf)
		return s.fail(c, fmt.Sprintf("%s: no exit within %v\nstdout:\n%s\nstderr:\n%s", where, readmeLineTimeout, tail(o, 2000), tail(e, 2000)))
	}
	f := strings.Fields(res)
	rc, _ := strconv.Atoi(f[2])
	for _, p := range f[3:] {
		pid, _ := strconv.Atoi(p)
		if !s.seen[pid] {
			s.seen[pid] = true
			s.background(where, pid)
		}
	}
	if strings.HasSuffix(cmd, "&") || strings.HasSuffix(cmd, "done") {
		t.Logf("README.md:%d started in the background (jobs: %s)", c.line, strings.Join(f[3:], " "))
		return true
	}
	stdout, _ := os.ReadFile(out)
	stderr, _ := os.ReadFile(errf)
	if msg := checkLine(c.comment, rc, stdout, stderr); msg != "" {
		return s.fail(c, fmt.Sprintf("%s: %s\nstdout:\n%s\nstderr:\n%s", where, msg, tail(stdout, 2000), tail(stderr, 2000)))
	}
	if reason, ok := readmePending[c.command]; ok {
		t.Errorf("%s: listed in readmePending (%s) but works now: remove it from the list", where, reason)
	}
	t.Logf("README.md:%d ok (exit %d, %v)", c.line, rc, time.Since(start).Round(time.Millisecond))
	return true
}

func (s *readmeShell) fail(c shCmd, msg string) bool {
	if reason, ok := readmePending[c.command]; ok {
		s.t.Skipf("%s\npending (readmePending): %s; the rest of this environment is not run", msg, reason)
	}
	s.t.Error(msg)
	return false
}

// An assignment starts nothing, so it need not wait for readiness.
var assignmentRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=\S*$`)

func isAssignment(cmd string) bool { return assignmentRE.MatchString(cmd) }

// checkLine checks a line's exit code and output against its comment: an
// "exit code N" there is the expected code (else 0), words in capitals
// (SUCCESS, ROLLEDBACK, OPEN) must be in the output, and a JSON object
// shown must be a subset of the JSON printed.
func checkLine(comment string, rc int, stdout, stderr []byte) string {
	want := 0
	if m := exitCodeRE.FindStringSubmatch(comment); m != nil {
		want, _ = strconv.Atoi(m[1])
	}
	if rc != want {
		return fmt.Sprintf("exit code %d, want %d", rc, want)
	}
	text, js := comment, ""
	if i := strings.Index(comment, "{"); i >= 0 {
		text, js = comment[:i], comment[i:]
	}
	all := string(stdout) + string(stderr)
	for _, w := range capsRE.FindAllString(text, -1) {
		if !strings.Contains(all, w) {
			return fmt.Sprintf("output lacks %s, which the README's comment promises", w)
		}
	}
	if js != "" {
		js = strings.NewReplacer(", ...", "", "...", "").Replace(js)
		var wantJS, got any
		if err := json.Unmarshal([]byte(js), &wantJS); err != nil {
			return fmt.Sprintf("the README's JSON comment does not parse (%v): %s", err, js)
		}
		if err := json.Unmarshal(stdout, &got); err != nil {
			return fmt.Sprintf("stdout is not one JSON document: %v", err)
		}
		if msg := jsonSubset("", wantJS, got); msg != "" {
			return msg
		}
	}
	return ""
}

func jsonSubset(path string, want, got any) string {
	if w, ok := want.(map[string]any); ok {
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: got %v, want an object", path, got)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s.%s missing from the JSON printed", path, k)
			}
			if msg := jsonSubset(path+"."+k, wv, gv); msg != "" {
				return msg
			}
		}
		return ""
	}
	if reflect.TypeOf(want) != reflect.TypeOf(got) {
		return fmt.Sprintf("%s: got %v (%T), want %v (%T)", path, got, got, want, want)
	}
	key := path[strings.LastIndex(path, ".")+1:]
	if !readmeIllustrative[key] && !reflect.DeepEqual(want, got) {
		return fmt.Sprintf("%s: got %v, the README shows %v", path, got, want)
	}
	return ""
}

// argsOf waits until pid has exec'd baton and returns its arguments (the
// lines' variables expanded by bash).
func (s *readmeShell) argsOf(where string, pid int) []string {
	var args []string
	exited := false
	testwait.Until(10*time.Second, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			exited = true
			return true
		}
		a := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(a) > 1 && filepath.Base(a[0]) == "baton" {
			args = a[1:]
			return true
		}
		return false
	})
	if args == nil {
		s.t.Errorf("%s: background process %d did not become baton (exited: %v)", where, pid, exited)
	}
	return args
}

func flagOf(args []string, name string) string {
	for i, a := range args {
		if (a == "--"+name || a == "-"+name) && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

type readyWait struct {
	httpAddr string // an agent's /readyz
	rsID     string // a region server registered and live
}

// background records a process a line started in the background, so the
// next foreground line waits until it is ready instead of sleeping.
func (s *readmeShell) background(where string, pid int) {
	args := s.argsOf(where, pid)
	if len(args) == 0 {
		return
	}
	switch args[0] {
	case "agent":
		admin, httpAddr := flagOf(args, "grpc-addr"), flagOf(args, "http-addr")
		if contains(args, "--dev") {
			if admin == "" {
				admin = "127.0.0.1:7070"
			}
			if httpAddr == "" {
				httpAddr = "127.0.0.1:7072"
			}
		}
		id := flagOf(args, "id")
		if id == "" && contains(args, "--dev") {
			id = "dev"
		}
		s.agents[id] = pid
		s.masters = append(s.masters, admin)
		if cert := flagOf(args, "tls-cert"); cert != "" && !s.tls.Enabled() {
			abs := func(p string) string {
				if p == "" || filepath.IsAbs(p) {
					return p
				}
				return filepath.Join(s.dir, p)
			}
			s.tls = security.Files{CA: abs(flagOf(args, "tls-ca")), Cert: abs(cert), Key: abs(flagOf(args, "tls-key"))}
		}
		if httpAddr == "" {
			s.t.Errorf("%s: an agent without --http-addr: TestReadme cannot wait for it to be ready", where)
			return
		}
		s.waits = append(s.waits, readyWait{httpAddr: httpAddr})
	case "regionserver":
		s.waits = append(s.waits, readyWait{rsID: flagOf(args, "id")})
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// ready waits until every process started in the background so far is
// ready: an agent's /readyz answers 200 (a leader is known), a region
// server is live in `rs list`.
func (s *readmeShell) ready(where string) bool {
	waits := s.waits
	s.waits = nil
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, w := range waits {
		var last string
		for {
			ok := false
			if w.httpAddr != "" {
				ok, last = s.readyz(ctx, w.httpAddr)
			} else {
				ok, last = s.rsLive(ctx, w.rsID)
			}
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				s.t.Errorf("%s: before this line, %+v not ready within 30s: %s", where, w, last)
				return false
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return true
}

func (s *readmeShell) readyz(ctx context.Context, addr string) (bool, string) {
	scheme, hc := "http", http.DefaultClient
	if s.tls.Enabled() {
		creds, err := security.Load(s.tls, nil, nil)
		if err != nil {
			return false, err.Error()
		}
		scheme, hc = "https", &http.Client{Transport: &http.Transport{TLSClientConfig: creds.ClientConfig(security.RoleMaster)}}
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", scheme+"://"+addr+"/readyz", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK, strings.TrimSpace(string(b))
}

func (s *readmeShell) rsLive(ctx context.Context, id string) (bool, string) {
	out, err := exec.CommandContext(ctx, nodeBin, append([]string{"rs", "list", "--json", "--timeout", "5s", "--addr", strings.Join(s.masters, ",")}, s.tlsArgs()...)...).Output()
	if err != nil {
		return false, fmt.Sprintf("rs list: %v", err)
	}
	var l struct {
		Servers []struct {
			ID         string `json:"id"`
			LeaseState string `json:"lease_state"`
		} `json:"servers"`
	}
	if err := json.Unmarshal(out, &l); err != nil {
		return false, fmt.Sprintf("rs list: %v", err)
	}
	for _, sv := range l.Servers {
		if sv.ID == id {
			return strings.EqualFold(sv.LeaseState, "live"), "lease " + sv.LeaseState
		}
	}
	return false, id + " not registered"
}

// killLeader is the README's placeholder line: it SIGKILLs the agent that
// `cluster status` names the leader, as the reader would by hand.
func (s *readmeShell) killLeader(where string) {
	t := s.t
	if !s.ready(where) {
		return
	}
	out, err := exec.Command(nodeBin, append([]string{"cluster", "status", "--json", "--addr", strings.Join(s.masters, ",")}, s.tlsArgs()...)...).Output()
	if err != nil {
		t.Fatalf("%s: cluster status: %v", where, err)
	}
	var st struct {
		LeaderID string `json:"leader_id"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("%s: cluster status --json: %v\n%s", where, err, out)
	}
	pid, ok := s.agents[st.LeaderID]
	if !ok {
		t.Fatalf("%s: the leader %q is none of the agents the README started: %v\n%s", where, st.LeaderID, s.agents, out)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("%s: kill %d: %v", where, pid, err)
	}
	t.Logf("%s: killed the leader %s (pid %d)", where, st.LeaderID, pid)
	delete(s.agents, st.LeaderID)
}
