package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/integration/harness"
	"github.com/baton-dev/baton/internal/testwait"
)

// The disk tests put every node's data directory on its own small tmpfs
// (root only), fill one node's file system with a filler file while
// procedures run, and check that the node stops leading and reports not
// ready without crashing, that the others carry on, and that once the
// filler is gone and the node restarted it catches up with nothing lost.

// diskMountPrefix names the tmpfs mount points of these tests, so that a
// later run can unmount what a crashed one left.
const diskMountPrefix = "baton-disk-"

// diskMountSize is each node's file system: room for a few thousand small
// procedures' raft log and WAL segments (the WAL preallocates nothing).
const diskMountSize = "24m"

// sweepDiskMounts unmounts and removes the mounts (tmpfs, and ext4 on loop
// devices) a crashed earlier run left behind, recognised by their path
// prefix, and detaches their loop devices.
func sweepDiskMounts(t *testing.T) {
	f, err := os.Open("/proc/mounts")
	if err != nil {
		return
	}
	prefix := filepath.Join(os.TempDir(), diskMountPrefix)
	var stale []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && strings.HasPrefix(fields[1], prefix) {
			stale = append(stale, fields[1])
		}
	}
	f.Close()
	// Deepest first: an ext4 mount sits inside its tmpfs.
	for i := len(stale) - 1; i >= 0; i-- {
		m := stale[i]
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			t.Logf("sweep: unmount stale %s: %v", m, err)
			continue
		}
		t.Logf("sweep: unmounted %s, left by an earlier run", m)
	}
	if out, err := exec.Command("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			fs := strings.Fields(line)
			if len(fs) == 2 && strings.HasPrefix(fs[1], prefix) {
				_ = exec.Command("losetup", "-d", fs[0]).Run()
				t.Logf("sweep: detached %s (%s), left by an earlier run", fs[0], fs[1])
			}
		}
	}
	for _, m := range stale {
		os.RemoveAll(m)
	}
}

// mountSmallDisks mounts one tmpfs of diskMountSize per node and returns
// the data directories on them, by node id. It skips the test when it
// cannot mount (not root, no tmpfs); cleanup unmounts on every exit path.
func mountSmallDisks(t *testing.T, ids ...string) map[string]string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("disk tests mount a small tmpfs per node: run as root (or in a privileged container)")
	}
	sweepDiskMounts(t)
	dirs := map[string]string{}
	for _, id := range ids {
		mp, err := os.MkdirTemp("", diskMountPrefix+id+"-")
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", mp, "tmpfs", 0, "size="+diskMountSize); err != nil {
			os.RemoveAll(mp)
			t.Skipf("cannot mount a tmpfs at %s (%v): disk tests need CAP_SYS_ADMIN", mp, err)
		}
		t.Cleanup(func() {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", mp, err)
			}
			os.RemoveAll(mp)
		})
		dirs[id] = filepath.Join(mp, "data")
	}
	return dirs
}

// fillDisk writes path until its file system is full and returns how many
// bytes it wrote.
func fillDisk(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for _, chunk := range []int{1 << 20, 64 << 10, 4 << 10, 512} {
		buf := make([]byte, chunk)
		for {
			k, err := f.Write(buf)
			n += int64(k)
			if err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("fill %s: %v", path, err)
				}
				break
			}
		}
	}
	return n
}

// readyz returns node id's /readyz status code and body.
func readyz(ctx context.Context, c *harness.Cluster, id string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.Node(id).HTTPAddr+"/readyz", nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// waitOrDump is testwait.ForNil that first saves c's goroutines when the
// wait fails: the stacks of a node stuck after a storage failure say
// where it is stuck.
func waitOrDump(t *testing.T, c *harness.Cluster, d time.Duration, what string, check func() error) {
	t.Helper()
	if err := testwait.Err(d, what, check); err != nil {
		dumpGoroutines(t, c)
		t.Fatal(err)
	}
}

// readyzSays is nil once node id's /readyz answers status code with a body
// holding says: for a wait on a node becoming (not) ready, and why.
func readyzSays(ctx context.Context, c *harness.Cluster, id string, code int, says string) error {
	got, body, err := readyz(ctx, c, id)
	if err != nil {
		return err
	}
	if got != code || !strings.Contains(body, says) {
		return fmt.Errorf("%d %s", got, body)
	}
	return nil
}

// notReadyFromStorage is nil once node id's /readyz answers 503 naming a
// local storage failure.
func notReadyFromStorage(ctx context.Context, c *harness.Cluster, id string) error {
	return readyzSays(ctx, c, id, http.StatusServiceUnavailable, "local storage failed")
}

// submitAll submits n sleep procedures under nonces prefix-0.. from
// concurrent goroutines, retrying each until acknowledged, and returns
// the ids by nonce.
func submitAll(t *testing.T, ctx context.Context, cl *client.Client, prefix string, n int) map[string]uint64 {
	t.Helper()
	var mu sync.Mutex
	ids := map[string]uint64{}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nonce := fmt.Sprintf("%s-%d", prefix, i)
			id, _, err := submitRetrying(ctx, cl, "sleep", map[string]string{"steps": "3", "delay": "5ms"}, nonce)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			ids[nonce] = id
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return ids
}

// checkAllSucceeded waits until every procedure in ids is terminal and
// fails t unless each is SUCCESS under its own nonce.
func checkAllSucceeded(t *testing.T, ctx context.Context, cl *client.Client, ids map[string]uint64) {
	t.Helper()
	for nonce, id := range ids {
		state, _, errText, err := terminalWithin(ctx, cl, id, 30*time.Second)
		if err != nil {
			t.Fatalf("nonce %s: %v", nonce, err)
		}
		if state != client.StateSuccess {
			t.Errorf("procedure %d (nonce %s) ended %s (%s), want SUCCESS", id, nonce, state, errText)
		}
		p, err := cl.Get(ctx, id)
		if err != nil {
			t.Fatalf("get %d: %v", id, err)
		}
		if p.GetNonce() != nonce {
			t.Errorf("procedure %d has nonce %q, want %q", id, p.GetNonce(), nonce)
		}
	}
}

var storageErrLine = regexp.MustCompile(`(?m)^.*\[ERROR\].*(local WAL failed|local storage failed).*$`)

// runFullDisk is the scenario of TestFullDiskLeader and
// TestFullDiskFollower: fill the file system of the node chosen by pick
// while procedures run, check it is not ready and not leading, free the
// space, restart it, and check that everything acknowledged is there on
// every node.
func runFullDisk(t *testing.T, pick func(c *harness.Cluster, leader string) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	ids := []string{"n1", "n2", "n3"}
	c := harness.New(t, harness.Options{Binary: nodeBin, Nodes: 3, DataDirs: mountSmallDisks(t, ids...)})
	leader := c.WaitLeader(ctx)
	cl := c.Client()
	acked := submitAll(t, ctx, cl, "before", 20)
	checkAllSucceeded(t, ctx, cl, acked)

	target := pick(c, leader)
	filler := filepath.Join(filepath.Dir(c.Node(target).DataDir), "filler")
	start := time.Now()
	wrote := fillDisk(t, filler)
	t.Logf("filled %s's file system with %d bytes (leader was %s)", target, wrote, leader)

	// Writes go on: the other two make a quorum. Submitting while the
	// target is full also makes it notice (its FSM applies every entry).
	during := submitAll(t, ctx, cl, "during", 30)
	checkAllSucceeded(t, ctx, cl, during)
	for k, v := range during {
		acked[k] = v
	}

	waitOrDump(t, c, 30*time.Second, target+" to report not ready", func() error {
		return notReadyFromStorage(ctx, c, target)
	})
	t.Logf("%s not ready %v after the fill", target, time.Since(start).Round(time.Millisecond))
	newLeader := c.WaitLeader(ctx)
	if newLeader == target {
		t.Fatalf("%s leads with a full disk", target)
	}
	st, err := c.Status(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	if st.State == "Leader" || st.Executor || st.Ready || st.StorageError == "" {
		t.Errorf("%s with a full disk: state %s, executor %v, ready %v, storage_error %q; want a non-leader, not ready, naming the failure", target, st.State, st.Executor, st.Ready, st.StorageError)
	}
	if !c.Node(target).Running() {
		t.Fatalf("%s exited with a full disk (log: %s)", target, c.Node(target).LogPath)
	}
	log := c.CurrentLog(target)
	if strings.Contains(log, "panic:") || strings.Contains(log, "goroutine ") {
		t.Errorf("%s panicked (log: %s)", target, c.Node(target).LogPath)
	}
	lines := storageErrLine.FindAllString(log, -1)
	if len(lines) == 0 || len(lines) > 3 {
		t.Errorf("%s logged %d storage failure lines, want one per failed store (at most 3):\n%s", target, len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if !strings.Contains(l, "no space left on device") || !strings.Contains(l, c.Node(target).DataDir) {
			t.Errorf("storage failure line names neither the error nor the path: %s", l)
		}
	}
	t.Logf("%s said: %s", target, strings.Join(lines, "\n"))

	// Free the space and restart the node: it must rejoin and catch up.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c.Kill(target)
	c.Restart(target)
	restarted := time.Now()
	waitOrDump(t, c, 30*time.Second, target+" ready after the restart", func() error {
		return readyzSays(ctx, c, target, http.StatusOK, "")
	})
	after := submitAll(t, ctx, cl, "after", 10)
	checkAllSucceeded(t, ctx, cl, after)
	for k, v := range after {
		acked[k] = v
	}
	checkAllSucceeded(t, ctx, cl, acked)
	t.Logf("%s restarted; ready and new procedures done %v later", target, time.Since(restarted).Round(time.Millisecond))
	if _, err := c.Converge(ctx, 200*time.Millisecond); err != nil {
		dumpGoroutines(t, c)
		t.Fatal(err)
	}
	t.Logf("converged %v after the restart", time.Since(restarted).Round(time.Millisecond))
	doms := domainOrSkip(t, ctx, c)
	ref := sameDomains(t, doms)
	for _, id := range acked {
		if _, ok := ref[fmt.Sprintf("effects/%d/0", id)]; !ok {
			t.Errorf("acknowledged procedure %d has no effects/%d/0 key", id, id)
		}
	}
	t.Logf("%d acknowledged procedures all SUCCESS on every node after %s's restart", len(acked), target)
}

// TestFullDiskLeader fills the leader's file system while procedures run.
// The leader must give up leadership and report not ready, without
// panicking; the others elect a leader and finish every procedure; once
// the filler is removed and the node restarted it catches up, and no
// acknowledged procedure is lost.
func TestFullDiskLeader(t *testing.T) {
	runFullDisk(t, func(_ *harness.Cluster, leader string) string { return leader })
}

// TestFullDiskFollower is TestFullDiskLeader with a follower's file system
// filled: the follower reports not ready; the leader keeps leading.
func TestFullDiskFollower(t *testing.T) {
	runFullDisk(t, func(c *harness.Cluster, leader string) string { return c.Followers(leader)[0] })
}

// dumpGoroutines saves every running node's goroutines (from
// /debug/pprof) next to its log, for a test that found a node stuck.
func dumpGoroutines(t *testing.T, c *harness.Cluster) {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		resp, err := http.Get("http://" + n.HTTPAddr + "/debug/pprof/goroutine?debug=2")
		if err != nil {
			// Not serving HTTP (stuck starting?): the runtime's own dump.
			t.Logf("goroutines of %s: %v; sending SIGQUIT (dump in %s)", n.ID, err, n.LogPath)
			_ = c.Signal(n.ID, syscall.SIGQUIT)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		path := filepath.Join(filepath.Dir(n.LogPath), "goroutines.txt")
		if err := os.WriteFile(path, b, 0o644); err == nil {
			t.Logf("goroutines of %s: %s", n.ID, path)
		}
	}
}

// A device whose writes fail while the page cache takes them: ext4 on a
// loop device whose (sparse) backing file lives on a small tmpfs. Once the
// tmpfs is full, write(2) on the ext4 still succeeds, but writeback fails
// and fsync/fdatasync returns an error (ENOSPC or EIO): the case of a disk
// whose fsync fails. Device-mapper error targets would do the same, but
// this kernel has no device-mapper driver.

// loopDisk is one node's failing-device setup.
type loopDisk struct {
	tmpfs, img, loop, fs string
}

// dataDir is the node's data directory on the ext4.
func (d *loopDisk) dataDir() string { return filepath.Join(d.fs, "data") }

func runCmd(t *testing.T, name string, args ...string) error {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// mountLoopDisks sets up a loop-backed ext4 per node (skipping the test
// when it cannot: not root, no loop devices, no mkfs.ext4) and registers
// its teardown on every exit path.
func mountLoopDisks(t *testing.T, ids ...string) map[string]*loopDisk {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the fsync test mounts a loop device: run as root (or in a privileged container)")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("the fsync test needs mkfs.ext4")
	}
	sweepDiskMounts(t)
	disks := map[string]*loopDisk{}
	for _, id := range ids {
		mp, err := os.MkdirTemp("", diskMountPrefix+"loop-"+id+"-")
		if err != nil {
			t.Fatal(err)
		}
		d := &loopDisk{tmpfs: mp, img: filepath.Join(mp, "img"), fs: filepath.Join(mp, "fs")}
		if err := syscall.Mount("tmpfs", mp, "tmpfs", 0, "size=40m"); err != nil {
			os.RemoveAll(mp)
			t.Skipf("cannot mount a tmpfs at %s (%v): needs CAP_SYS_ADMIN", mp, err)
		}
		t.Cleanup(func() {
			if d.loop != "" {
				_ = syscall.Unmount(d.fs, syscall.MNT_DETACH)
				if err := runCmd(t, "losetup", "-d", d.loop); err != nil {
					t.Errorf("%v", err)
				}
			}
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", mp, err)
			}
			os.RemoveAll(mp)
		})
		if err := os.Truncate(d.img, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		f, err := os.Create(d.img)
		if err != nil {
			t.Fatal(err)
		}
		f.Truncate(128 << 20) // sparse: the tmpfs holds only what is written
		f.Close()
		out, err := exec.Command("losetup", "-f", "--show", d.img).Output()
		if err != nil {
			t.Skipf("no loop device (%v): the fsync test needs one", err)
		}
		d.loop = strings.TrimSpace(string(out))
		if err := runCmd(t, "mkfs.ext4", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", d.loop); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(d.fs, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := d.mount(); err != nil {
			t.Fatal(err)
		}
		disks[id] = d
	}
	return disks
}

func (d *loopDisk) mount() error {
	return syscall.Mount(d.loop, d.fs, "ext4", 0, "errors=continue")
}

// TestFsyncFailureOnDevice makes the leader's device fail writeback, so its
// fdatasyncs fail while its writes still succeed. The node must stop
// leading and report not ready; the others finish every procedure, and
// nothing acknowledged is lost. After the device works again (the backing
// tmpfs has room), the file system is checked and remounted and the node
// restarted: it either catches up, or refuses to start naming a damaged
// file (then, its data directory removed, it rejoins). Either way every
// node ends with the same state.
func TestFsyncFailureOnDevice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Second)
	defer cancel()
	ids := []string{"n1", "n2", "n3"}
	disks := mountLoopDisks(t, ids...)
	dirs := map[string]string{}
	for id, d := range disks {
		dirs[id] = d.dataDir()
	}
	c := harness.New(t, harness.Options{Binary: nodeBin, Nodes: 3, DataDirs: dirs, Env: []string{"GOTRACEBACK=crash"}})
	leader := c.WaitLeader(ctx)
	cl := c.Client()
	acked := submitAll(t, ctx, cl, "before", 20)
	checkAllSucceeded(t, ctx, cl, acked)

	d := disks[leader]
	filler := filepath.Join(d.tmpfs, "filler")
	fillDisk(t, filler)
	merge(acked, submitAll(t, ctx, cl, "during", 30))
	checkAllSucceeded(t, ctx, cl, acked)
	waitOrDump(t, c, 30*time.Second, leader+" to report not ready", func() error {
		return notReadyFromStorage(ctx, c, leader)
	})
	if nl := c.WaitLeader(ctx); nl == leader {
		t.Fatalf("%s leads on a device whose fsync fails", leader)
	}
	st, err := c.Status(ctx, leader)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: state %s, ready %v: %s", leader, st.State, st.Ready, st.StorageError)
	if st.State == "Leader" || st.Executor {
		t.Errorf("%s: state %s, executor %v on a failing device", leader, st.State, st.Executor)
	}
	if log := c.CurrentLog(leader); strings.Contains(log, "panic:") {
		t.Errorf("%s panicked (log: %s)", leader, c.Node(leader).LogPath)
	}

	// Repair: room for the device again, check and remount the file
	// system, restart the node.
	c.Kill(leader)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Unmount(d.fs, 0); err != nil {
		t.Fatalf("unmount %s: %v", d.fs, err)
	}
	// fsck exits 1 when it fixed something; only ≥ 4 is a failure.
	if err := exec.Command("fsck.ext4", "-fy", d.loop).Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() >= 4 {
			t.Fatalf("fsck %s: %v", d.loop, err)
		}
	}
	if err := d.mount(); err != nil {
		t.Fatal(err)
	}
	c.Restart(leader)
	exited := false
	waitOrDump(t, c, 20*time.Second, leader+" to start or refuse to", func() error {
		if !c.Node(leader).Running() {
			exited = true
			return nil
		}
		_, err := c.Status(ctx, leader)
		return err
	})
	if exited {
		code, _ := c.WaitExit(ctx, leader)
		// It refused to start: it must say which file, and why.
		log := c.CurrentLog(leader)
		if code == 0 || !strings.Contains(log, "damaged") {
			t.Fatalf("%s exited %d after the repair without naming a damaged file:\n%s", leader, code, lastLines(log, 5))
		}
		t.Logf("%s refused to start after the failed fsyncs: %s", leader, lastLines(log, 1))
		if err := os.RemoveAll(d.dataDir()); err != nil {
			t.Fatal(err)
		}
		c.Restart(leader)
	} else {
		t.Logf("%s restarted on its own files after the failed fsyncs", leader)
	}
	merge(acked, submitAll(t, ctx, cl, "after", 10))
	expectSameState(t, ctx, c, cl, acked)
}
