// Command baton (built from cmd/node: `go build -o baton ./cmd/node`) is
// Baton's single binary: the cluster agent (`baton agent`),
// the admin API's command-line client (`baton proc ...`, `baton cluster ...`,
// and for the domain `baton ns|table|region|rs|balance|lock ...`) and the
// embedded single-node demo of the procedure framework.
//
// Exit codes: 0 ok; 1 the operation failed (a procedure ended ROLLEDBACK,
// NOT_FOUND, FAILED_PRECONDITION, ...); 2 bad usage (flags, arguments,
// arguments the cluster refused as INVALID_ARGUMENT); 3 the cluster is
// unavailable (no leader answered in time).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
)

const usage = `usage: baton <command> [flags]

commands:
  agent   run a cluster node (--dev: a single-node cluster on loopback, with
          simulated region servers in the same process)
  regionserver
          run a simulated region server that registers with the masters
  proc    submit, list, watch and control procedures:
          submit TYPE [--arg k=v ...] [--nonce N] [--wait], get ID,
          list [--all], wait ID, abort ID, pause ID, resume ID, ack ID
  cluster status, join --id ID --raft-addr H:P --admin-addr H:P, remove ID,
          maintenance on|off|status, repairs
  ns      create NAME, delete NAME, list
  table   create NAME [--regions N], delete|enable|disable|describe NAME, list
          (NAME or NS:NAME; --namespace NS)
  region  list [--table T], move REGION [--to SERVER],
          assign REGION [--server S], unassign REGION
  rs      list (lease state, region count, last heartbeat),
          regions SERVER [--direct ADDR], recover SERVER
  balance even out the region counts of the live region servers
  lock    acquire --kind K --name N [--exclusive] [--keepalive], heartbeat ID,
          release ID
          (commands that start a procedure take --wait)
  repair kit: region assign|unassign [--override], rs recover, proc cancel,
          proc bypass, cluster maintenance, cluster repairs; the commands
          that override the cluster or take a region offline need --yes
          (without it: what they would do, exit 2)
  demo    run crash-proof procedures in this process, on a WAL in a fresh
          temporary directory (or --data-dir DIR); --crash-after N stops the
          process mid-way, and a run with the same --data-dir resumes exactly
          where it stopped
  bench   scale [--regions N,N,...]: start real clusters on this machine and
          print how opening regions, memory, disk, failover, a region
          server crash and a wiped master's catch-up grow with the regions
  tls     ca create, cert create --role master|regionserver|client --id ID:
          a development CA and certificates for --tls-ca/--tls-cert/--tls-key
  acl     whoami, grant CLIENT --permission read|operate|admin, revoke CLIENT,
          token create NAME --permission P, token delete ACCESSOR, list
  audit   list [--principal P] [--method M]: who changed what, and when
  version print the version, the commit it was built from and the Go version

Client commands take --addr (any nodes' admin addresses, comma-separated;
env BATON_ADDR, default 127.0.0.1:7070), --json, and with access control
--tls-* (a client certificate) or --token (env BATON_TOKEN).
Exit codes: 0 ok, 1 failed, 2 bad usage, 3 cluster unavailable.
Run 'baton <command> -h' for the command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return (&cli{ctx: ctx, stdout: stdout, stderr: stderr, getenv: os.Getenv}).run(args)
}

func (c *cli) run(args []string) int {
	stdout, stderr := c.stdout, c.stderr
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "agent":
		return c.agent(args[1:])
	case "regionserver":
		return c.regionserver(args[1:])
	case "proc":
		return c.proc(args[1:])
	case "cluster":
		return c.cluster(args[1:])
	case "ns": // the client commands: namespace_cmd.go, table_cmd.go, rs_cmd.go, lock_cmd.go
		return c.ns(args[1:])
	case "table":
		return c.table(args[1:])
	case "region":
		return c.region(args[1:])
	case "rs":
		return c.rs(args[1:])
	case "balance":
		return c.balance(args[1:])
	case "lock":
		return c.lock(args[1:])
	case "bench":
		return c.bench(args[1:])
	case "tls":
		return c.tls(args[1:])
	case "acl":
		return c.acl(args[1:])
	case "audit":
		return c.audit(args[1:])
	case "demo":
		return demo(args[1:], stdout, stderr)
	case "version", "--version":
		return c.version(args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "baton: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
