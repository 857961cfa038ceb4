package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// The top-level commands register themselves, each from its own file's
// init, so that a new command touches only its file: the dispatch in
// main.go and the usage `baton -h` prints are built from topLevel.

// topCommand is `baton <name> ...`.
type topCommand struct {
	name    string
	aliases []string // other words that run it ("--version")
	// rank is the command's place in the main usage, lowest first; a new
	// command takes a free number between its neighbours'.
	rank int
	// summary is the command's entry in the main usage without the name
	// column: its first line is printed beside the name, the others under
	// that one.
	summary string
	run     func(c *cli, args []string) int
}

// usageEntry is a block of the main usage's command list: a command's, or
// a note that is no command of its own (the repair kit).
type usageEntry struct {
	rank int
	text string
}

// registry holds the top-level commands. It is filled at init and only
// read afterwards, so it needs no lock.
type registry struct {
	byWord  map[string]*topCommand // by name and alias; nil for a help word
	entries []usageEntry
	ranks   map[int]string // who took a rank, for the panic
}

// helpWords print the main usage; no command may take them.
var helpWords = []string{"-h", "--help", "help"}

// topLevel is every top-level command of baton.
var topLevel = newRegistry()

func newRegistry() *registry {
	r := &registry{byWord: map[string]*topCommand{}, ranks: map[int]string{}}
	for _, w := range helpWords {
		r.byWord[w] = nil
	}
	return r
}

// Name column of the main usage: "  name    summary", a summary's further
// lines under its first.
const (
	usageNameWidth = 7
	usageIndent    = "          "
)

// add registers cmd. A name, alias or rank taken twice is a programming
// error, so it panics: at init, which every test of the package runs.
func (r *registry) add(cmd topCommand) {
	if cmd.name == "" || cmd.run == nil || cmd.summary == "" {
		panic(fmt.Sprintf("baton: command %q registered without a name, summary or run function", cmd.name))
	}
	p := &cmd
	for _, w := range append([]string{cmd.name}, cmd.aliases...) {
		if _, taken := r.byWord[w]; taken {
			panic(fmt.Sprintf("baton: command word %q registered twice", w))
		}
		r.byWord[w] = p
	}
	r.addEntry(cmd.rank, cmd.name, cmd.usageText())
}

// note registers text, verbatim lines of the main usage's command list
// that are no command of their own, at rank.
func (r *registry) note(rank int, text string) {
	if !strings.HasSuffix(text, "\n") {
		panic(fmt.Sprintf("baton: usage note at rank %d does not end its line", rank))
	}
	r.addEntry(rank, "a note", text)
}

func (r *registry) addEntry(rank int, who, text string) {
	if other, taken := r.ranks[rank]; taken {
		panic(fmt.Sprintf("baton: usage rank %d registered twice (%s, %s)", rank, other, who))
	}
	r.ranks[rank] = who
	r.entries = append(r.entries, usageEntry{rank: rank, text: text})
}

// usageText is cmd's block of the main usage: the summary beside the name,
// or under it when the name is wider than the column.
func (cmd *topCommand) usageText() string {
	var b strings.Builder
	for i, line := range strings.Split(cmd.summary, "\n") {
		switch {
		case i > 0:
			b.WriteString(usageIndent)
		case len(cmd.name) > usageNameWidth:
			fmt.Fprintf(&b, "  %s\n%s", cmd.name, usageIndent)
		default:
			fmt.Fprintf(&b, "  %-*s ", usageNameWidth, cmd.name)
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// lookup returns the command word names, if one does.
func (r *registry) lookup(word string) (*topCommand, bool) {
	cmd := r.byWord[word]
	return cmd, cmd != nil
}

const (
	usageHead = `usage: baton <command> [flags]

commands:
`
	usageFoot = `
Client commands take --addr (any nodes' admin addresses, comma-separated;
env BATON_ADDR, default 127.0.0.1:7070), --json, and with access control
--tls-* (a client certificate) or --token (env BATON_TOKEN).
Exit codes: 0 ok, 1 failed, 2 bad usage, 3 cluster unavailable.
Run 'baton <command> -h' for the command's flags.
`
)

// usage is the main usage: `baton -h`, and after no or an unknown command.
func (r *registry) usage() string {
	entries := slices.SortedFunc(slices.Values(r.entries), func(a, b usageEntry) int { return cmp.Compare(a.rank, b.rank) })
	var b strings.Builder
	b.WriteString(usageHead)
	for _, e := range entries {
		b.WriteString(e.text)
	}
	b.WriteString(usageFoot)
	return b.String()
}
