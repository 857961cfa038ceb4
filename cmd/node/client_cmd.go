package main

// What the client commands share: namespaces (namespace_cmd.go), tables,
// regions and balancing (table_cmd.go), region servers (rs_cmd.go) and
// external locks (lock_cmd.go). Commands that change something start a
// procedure on the leader and print its id; with --wait they follow it to
// its end and exit 1 if it rolled back. Commands that read print a table,
// or with --json one document.

import (
	"flag"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/cluster/client"
)

// command is one client command being run: its flags and the advice its
// failures get.
type command struct {
	c      *cli
	name   string // e.g. "table create"
	fs     *flag.FlagSet
	cf     *clientFlags
	advise map[codes.Code]string
}

func (c *cli) command(name, synopsis string, advise map[codes.Code]string) *command {
	fs, cf := c.newFlagSet(name, synopsis)
	return &command{c: c, name: name, fs: fs, cf: cf, advise: advise}
}

// parse parses args and checks that want positional arguments came (what
// names them in the error). ok is false when the command is over, with
// exit code code.
func (e *command) parse(args []string, want int, what string) (pos []string, code int, ok bool) {
	pos, err := parse(e.fs, args)
	if err != nil {
		return nil, parseFailed(err), false
	}
	if len(pos) != want {
		if want == 0 {
			return nil, e.fail(usagef("takes no arguments, got %q", pos)), false
		}
		return nil, e.fail(usagef("want exactly one %s, got %d arguments", what, len(pos))), false
	}
	for _, p := range pos {
		if strings.TrimSpace(p) == "" {
			return nil, e.fail(usagef("%s is empty", what)), false
		}
	}
	return pos, exitOK, true
}

// fail reports err and returns the exit code (see cli.finish).
func (e *command) fail(err error) int { return e.c.finishWith(e.name, e.fs, e.cf, err, e.advise) }

func (e *command) client() (*client.Client, error) { return e.cf.client() }

// withClient runs fn with a connection to the cluster; failing to make one
// fails the command.
func (e *command) withClient(fn func(cl *client.Client) int) int {
	cl, err := e.client()
	if err != nil {
		return e.fail(err)
	}
	defer cl.Close()
	return fn(cl)
}

// The main usage says it once for the client commands above it.
func init() {
	topLevel.note(110, usageIndent+"(commands that start a procedure take --wait)\n")
}

// start runs a command that starts a procedure: start asks the cluster for
// it, what names it in the report (see started).
func (e *command) start(what string, wait bool, start func(cl *client.Client) (uint64, error)) int {
	return e.withClient(func(cl *client.Client) int {
		id, err := start(cl)
		if err != nil {
			return e.fail(err)
		}
		return e.started(cl, what, id, wait)
	})
}

// read runs a command that reads: fetch asks the cluster and returns the
// --json document and, for human eyes, the function that prints the answer
// instead.
func (e *command) read(fetch func(cl *client.Client) (doc any, show func(), err error)) int {
	return e.withClient(func(cl *client.Client) int {
		doc, show, err := fetch(cl)
		if err != nil {
			return e.fail(err)
		}
		if e.cf.json {
			e.c.printJSON(doc)
		} else {
			show()
		}
		return exitOK
	})
}

// staleRead runs a read command that takes no arguments and no flag but
// --stale (and the client flags): fetch as read takes it, with the
// command's read flags.
func (c *cli) staleRead(name string, advise map[codes.Code]string, args []string, fetch func(cl *client.Client, rf *readFlags) (doc any, show func(), err error)) int {
	e := c.command(name, "[--stale]", advise)
	rf := addReadFlags(e.fs)
	if _, code, ok := e.parse(args, 0, ""); !ok {
		return code
	}
	return e.read(func(cl *client.Client) (any, func(), error) { return fetch(cl, rf) })
}

// nonceFlag adds --nonce to a command that starts something.
func (e *command) nonceFlag() *string {
	return e.fs.String("nonce", "", "idempotency key: running the command again with it returns the first id instead of starting again (default: a random one)")
}

// waitFlag adds --wait to a command that starts a procedure.
func (e *command) waitFlag() *bool {
	return e.fs.Bool("wait", false, "wait until the procedure is terminal; exit 1 if it rolled back")
}

// Advice for the codes whose default advice (cli.finish) is about
// procedures.
var (
	invalidAdvice = "the cluster refused the request as invalid: check the names and flags"
	nsAdvice      = map[codes.Code]string{
		codes.InvalidArgument:    invalidAdvice,
		codes.NotFound:           "list the namespaces with 'baton ns list'",
		codes.FailedPrecondition: "the namespace's state does not allow this: only an empty namespace can be deleted ('baton table list --namespace NS')",
	}
	tableAdvice = map[codes.Code]string{
		codes.InvalidArgument:    invalidAdvice,
		codes.NotFound:           "list the tables with 'baton table list' (a table is NAME or NS:NAME, or NAME with --namespace NS)",
		codes.FailedPrecondition: "the table's state does not allow this: see it with 'baton table describe NAME'",
	}
	regionAdvice = map[codes.Code]string{
		codes.InvalidArgument:    invalidAdvice,
		codes.NotFound:           "list the regions with 'baton region list' and the region servers with 'baton rs list'",
		codes.FailedPrecondition: "the region's or the server's state does not allow this: see 'baton region list' and 'baton rs list'",
	}
	balanceAdvice = map[codes.Code]string{
		codes.FailedPrecondition: "the cluster cannot balance now: see 'baton rs list' and 'baton region list'",
	}
)

// startedJSON is the --json document of a command that started a
// procedure: id and proc_id are both its id (id as 'baton proc submit'
// prints it, proc_id unambiguous beside other ids). With --wait it also
// holds the final state, its error, and the whole procedure.
type startedJSON struct {
	ID     uint64 `json:"id"`
	ProcID uint64 `json:"proc_id"`
	State  string `json:"state,omitempty"`
	Error  string `json:"error,omitempty"`
	// Code classifies a failed precondition (ALREADY_EXISTS, NOT_FOUND,
	// FAILED_PRECONDITION), as the code of an error document does.
	Code      string    `json:"code,omitempty"`
	ExitCode  int       `json:"exit_code,omitempty"`
	Procedure *procJSON `json:"procedure,omitempty"`
}

// started reports procedure id, which the command started to do what
// says ("create table default:t1"), and with wait follows it to its end:
// exit 1 unless it succeeded. Id 0 means the cluster found nothing to do.
func (e *command) started(cl *client.Client, what string, id uint64, wait bool) int {
	c := e.c
	if id == 0 {
		if e.cf.json {
			c.printJSON(startedJSON{})
		} else {
			fmt.Fprintf(c.stdout, "%s: nothing to do\n", what)
		}
		return exitOK
	}
	if !wait {
		if e.cf.json {
			c.printJSON(startedJSON{ID: id, ProcID: id})
		} else {
			fmt.Fprintf(c.stdout, "%s: procedure %d started ('baton proc wait %d' to follow)\n", what, id, id)
		}
		return exitOK
	}
	if !e.cf.json {
		fmt.Fprintf(c.stdout, "%s: procedure %d started; waiting\n", what, id)
	}
	p, code, ok := c.watch(e.name, e.fs, e.cf, cl, id)
	if !ok {
		return code
	}
	if e.cf.json {
		pj := toProcJSON(p)
		doc := startedJSON{ID: id, ProcID: id, State: p.GetState(), Error: p.GetError(), Code: p.GetErrorCode(), Procedure: &pj}
		if p.GetState() != client.StateSuccess {
			doc.ExitCode = exitFailed
		}
		c.printJSON(doc)
	}
	if p.GetState() != client.StateSuccess {
		c.printEnded(p)
		return exitFailed
	}
	if !e.cf.json {
		fmt.Fprintf(c.stdout, "%s: done (procedure %d %s)\n", what, id, p.GetState())
	}
	return exitOK
}

// subcommands dispatches args[0] of group ("baton table ...") to its
// command, or prints the group's usage.
func (c *cli) subcommands(group, usage string, args []string, cmds map[string]func([]string) int) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, usage)
		return exitUsage
	}
	if run, ok := cmds[args[0]]; ok {
		return run(args[1:])
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, usage)
		return exitOK
	}
	fmt.Fprintf(c.stderr, "baton %s: unknown command %q\n\n%s", group, args[0], usage)
	return exitUsage
}

const clientFlagsNote = `
Every command takes --addr (env BATON_ADDR, default 127.0.0.1:7070), --json
and --timeout. Run 'baton %s <command> -h' for its flags.
`
