// Command provision runs a crash-proof, three-state provisioning procedure
// (package provisionproc: the 35 lines a user writes) in one process, on a
// local write-ahead log: allocate a host, configure
// it, start it; if a state fails, what was done is undone, newest first.
// Kill it at any moment and run it again with the same --data-dir: it
// resumes where it stopped, and no state's effect is applied twice.
//
//	go run ./examples/provision --data-dir /tmp/provision
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/baton-dev/baton/examples/provisionproc"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/store"
)

func main() {
	dir := flag.String("data-dir", "", "the write-ahead log's directory (default: a fresh temporary one)")
	flag.Parse()
	if err := run(os.Stdout, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "provision:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, dir string) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "provision")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	wal, err := store.OpenWAL(store.DefaultWALConfig(dir))
	if err != nil {
		return err
	}
	defer wal.Close()
	reg := procedure.NewRegistry()
	if err := provisionproc.Register(reg); err != nil {
		return err
	}
	dc := provisionproc.NewDatacenter("db-2") // db-2's configuration fails
	x, err := procedure.New(procedure.Config{Store: wal, Registry: reg, Env: dc, RecordFormat: version.Newest})
	if err != nil {
		return err
	}
	if err := x.Start(); err != nil { // resumes whatever the log holds
		return err
	}
	defer x.Stop(context.Background())
	for _, host := range []string{"web-1", "db-2"} {
		// The nonce makes a rerun find the first submission instead of
		// starting again.
		id, err := x.Submit(&provisionproc.Provision{Host: host}, procedure.SubmitOptions{Nonce: "provision-" + host})
		if err != nil {
			return err
		}
		info, err := x.Wait(context.Background(), id)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %s", host, info.State)
		if info.Error != "" {
			fmt.Fprintf(w, " (%s)", info.Error)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "hosts:", dc.Snapshot())
	return nil
}
