package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/proto/adminpb"
)

// stalledSnapshotServer is an admin API whose SnapshotSave sends a first
// chunk (larger than the CLI's write buffer, so that it reaches the file
// at once) and then sends nothing more until the client goes away: a
// transfer held mid-stream for as long as the test needs.
type stalledSnapshotServer struct {
	adminpb.UnimplementedAdminServer
	ended chan error // the stream's end, as the server saw it
}

func (s *stalledSnapshotServer) SnapshotSave(_ *adminpb.SnapshotSaveRequest, stream grpc.ServerStreamingServer[adminpb.SnapshotChunk]) error {
	if err := stream.Send(&adminpb.SnapshotChunk{Data: bytes.Repeat([]byte("s"), 300<<10)}); err != nil {
		s.ended <- err
		return err
	}
	<-stream.Context().Done()
	s.ended <- stream.Context().Err()
	return stream.Context().Err()
}

// stalledSnapshot serves a stalledSnapshotServer on a loopback address.
func stalledSnapshot(t *testing.T) (addr string, ended <-chan error) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &stalledSnapshotServer{ended: make(chan error, 4)}
	gs := grpc.NewServer()
	adminpb.RegisterAdminServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String(), srv.ended
}

// midTransfer waits until the save into dir has written its temporary
// file's first bytes: the transfer is under way.
func midTransfer(t *testing.T, dir string) string {
	t.Helper()
	var tmp string
	testwait.ForNil(t, 30*time.Second, "the temporary file's first bytes", func() error {
		left, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
		if len(left) != 1 {
			return fmt.Errorf("temporary files %v", left)
		}
		if st, err := os.Stat(left[0]); err != nil || st.Size() == 0 {
			return fmt.Errorf("%s: %v, %v", left[0], st, err)
		}
		tmp = left[0]
		return nil
	})
	return tmp
}

// nothingKept fails t unless dir holds FILE "older" as it was, and no
// temporary file.
func nothingKept(t *testing.T, dir, file string) {
	t.Helper()
	if b, err := os.ReadFile(file); err != nil || string(b) != "older" {
		t.Fatalf("%s now %d bytes (%v), want the older one", file, len(b), err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// A save interrupted while the leader streams (the CLI's context ends, as
// SIGINT ends it) removes its temporary file, leaves an older FILE as it
// was, says so and exits 130; with --json in one document.
func TestSnapshotSaveInterruptedMidStream(t *testing.T) {
	addr, ended := stalledSnapshot(t)
	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", asJSON), func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "snap")
			if err := os.WriteFile(file, []byte("older"), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out, errb bytes.Buffer
			c := &cli{ctx: ctx, stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
			args := []string{"snapshot", "save", file, "--addr", addr}
			if asJSON {
				args = append(args, "--json")
			}
			codec := make(chan int, 1)
			go func() { codec <- c.run(args) }()
			midTransfer(t, dir)
			cancel()
			code := <-codec
			if code != exitInterrupted {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitInterrupted, out.String(), errb.String())
			}
			if err := <-ended; !errors.Is(err, context.Canceled) {
				t.Errorf("the server saw the stream end with %v, want it cancelled", err)
			}
			nothingKept(t, dir, file)
			want := fmt.Sprintf("interrupted by SIGINT after %d bytes: %s left as it was, the temporary file removed", 300<<10, file)
			if !strings.Contains(errb.String(), want) {
				t.Fatalf("stderr %q lacks %q", errb.String(), want)
			}
			if asJSON {
				var doc struct {
					Error struct {
						Code     string `json:"code"`
						Message  string `json:"message"`
						ExitCode int    `json:"exit_code"`
					} `json:"error"`
				}
				if err := json.Unmarshal(out.Bytes(), &doc); err != nil || doc.Error.Code != "CANCELLED" || doc.Error.Message != want || doc.Error.ExitCode != exitInterrupted {
					t.Fatalf("--json: %v: %s", err, out.String())
				}
			}
		})
	}
}

// The same with the binary and real signals: SIGTERM (a service manager
// stopping it; before, it killed the process and left the temporary file)
// and SIGINT, each mid-stream, leave nothing and exit 128 + the signal.
func TestSnapshotSaveSignalledMidStream(t *testing.T) {
	bin := buildBaton(t)
	addr, _ := stalledSnapshot(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(signalName(sig), func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "snap")
			if err := os.WriteFile(file, []byte("older"), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "snapshot", "save", file, "--addr", addr)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			midTransfer(t, dir)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) {
				t.Fatalf("%v, want exit %d\nstdout: %s\nstderr: %s", err, 128+int(sig), out.String(), errb.String())
			}
			nothingKept(t, dir, file)
			if want := "interrupted by " + signalName(sig) + " after"; !strings.Contains(errb.String(), want) {
				t.Fatalf("stderr %q lacks %q", errb.String(), want)
			}
		})
	}
}
