// Command node is Baton's single binary. This version carries the embedded
// single-node demo of the procedure framework; the cluster agent and the
// client subcommands build on the same packages.
//
// Exit codes: 0 ok, 1 the operation failed (e.g. a procedure that should
// succeed did not), 2 bad usage.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `usage: node <command> [flags]

commands:
  demo    run crash-proof procedures in this process, on a WAL under --data-dir;
          --crash-after N stops the process mid-way, and the next run resumes
          exactly where it stopped

Run 'node <command> -h' for the command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "demo":
		return demo(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "node: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
