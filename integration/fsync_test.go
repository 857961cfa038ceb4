package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/integration/harness"
)

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
