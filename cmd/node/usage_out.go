package main

import (
	"flag"
	"io"
)

// usageOut is a flag set's output: help that was asked for (-h, --help)
// goes to stdout, where a pager or grep can take it, and exit 0; usage
// printed because of a mistake goes to stderr beside the error, and exit 2.
// parse sets which one a command line is.
type usageOut struct {
	stdout, stderr io.Writer
	help           bool
}

func (u *usageOut) Write(p []byte) (int, error) {
	if u.help {
		return u.stdout.Write(p)
	}
	return u.stderr.Write(p)
}

// newUsageOut makes fs print usage through a usageOut.
func newUsageOut(fs *flag.FlagSet, stdout, stderr io.Writer) {
	fs.SetOutput(&usageOut{stdout: stdout, stderr: stderr})
}

// helpAsked reports whether args ask for help: -h, -help or --help before
// any "--" (after it everything is an argument).
func helpAsked(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}
