package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
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

// printDefaults is fs.PrintDefaults naming the type of each flag typeOf
// lists. The agent and the region server read every flag as a string, so
// that a bad value, from a flag, the environment or a --config file, is
// reported with all the other problems; PrintDefaults would show each as
// "string", a number's and a duration's too.
func printDefaults(fs *flag.FlagSet, typeOf map[string]string) {
	fs.VisitAll(func(f *flag.Flag) {
		var b strings.Builder
		fmt.Fprintf(&b, "  -%s", f.Name)
		name, usage := flag.UnquoteUsage(f)
		typ, typed := typeOf[f.Name]
		if typed {
			name = typ
		}
		if name != "" {
			b.WriteString(" " + name)
		}
		// As PrintDefaults: a one-letter flag without a type fits on
		// its line.
		if b.Len() <= 4 {
			b.WriteString("\t")
		} else {
			b.WriteString("\n    \t")
		}
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch d := f.DefValue; {
		case d == "" || d == "false":
		case typed || name == "":
			fmt.Fprintf(&b, " (default %s)", d)
		default:
			fmt.Fprintf(&b, " (default %q)", d)
		}
		fmt.Fprintln(fs.Output(), b.String())
	})
}
