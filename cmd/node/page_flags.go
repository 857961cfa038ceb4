package main

// Paged lists (region list, table list, rs list): by default the first page
// and a line on stderr saying how to get the next; --page-token resumes;
// --all walks every page, printing each as it arrives, and with --json
// writes one document whose array is streamed, so memory stays bounded
// however long the list.

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// pageFlags are the paging flags of a list command.
type pageFlags struct {
	size  int
	token string
	all   bool
	most  int
}

func addPageFlags(fs *flag.FlagSet, noun string, def, most int) *pageFlags {
	pf := &pageFlags{most: most}
	fs.IntVar(&pf.size, "page-size", 0, fmt.Sprintf("how many %s per page, 1 to %d (default %d)", noun, most, def))
	fs.StringVar(&pf.token, "page-token", "", "resume after the previous page: the token its stderr line (or next_page_token with --json) gave")
	fs.BoolVar(&pf.all, "all", false, "every page, printed as each arrives (with --json: one document, streamed)")
	return pf
}

// listFlags adds the flags of a list command: --state when the list is
// filtered by state (states names the ones it takes, "" for none), the
// page flags and --stale.
func (e *command) listFlags(noun string, def, most int, states string) (*statesFlag, *pageFlags, *readFlags) {
	var st statesFlag
	if states != "" {
		e.fs.Var(&st, "state", fmt.Sprintf("only the %s in this state (%s); repeat it or separate with commas for several", noun, states))
	}
	return &st, addPageFlags(e.fs, noun, def, most), addReadFlags(e.fs)
}

// check refuses a page size out of range (the masters would clamp it; a
// command line asking for more than it can get is a mistake worth saying).
func (pf *pageFlags) check() error {
	if pf.size < 0 || pf.size > pf.most {
		return usagef("--page-size %d: want 1 to %d (0 for the default)", pf.size, pf.most)
	}
	return nil
}

// statesFlag is a repeatable --state, which also takes a comma-separated
// list; states are sent upper-cased, as the masters spell them.
type statesFlag []string

func (s *statesFlag) String() string { return strings.Join(*s, ",") }

func (s *statesFlag) Set(v string) error {
	for _, st := range strings.Split(v, ",") {
		if st = strings.TrimSpace(st); st == "" {
			return fmt.Errorf("empty state in %q", v)
		}
		*s = append(*s, strings.ToUpper(st))
	}
	return nil
}

// morePages tells, on stderr, how to get the page after this one.
func (c *cli) morePages(cmd, noun, next string) {
	if next == "" {
		return
	}
	fmt.Fprintf(c.stderr, "(more %s: run 'baton %s' again with --page-token %s for the next page, or with --all for every page)\n", noun, cmd, next)
}

// jsonArrayStream writes one JSON document {"<key>": [items...], ...}
// item by item, indented as printJSON indents, so a list of any length is
// written in bounded memory.
type jsonArrayStream struct {
	w   io.Writer
	key string
	n   int
	err error
}

func newJSONArrayStream(w io.Writer, key string) *jsonArrayStream {
	s := &jsonArrayStream{w: w, key: key}
	_, s.err = fmt.Fprintf(w, "{\n  %q: [", key)
	return s
}

// add writes one item of the array.
func (s *jsonArrayStream) add(v any) {
	if s.err != nil {
		return
	}
	b, err := json.MarshalIndent(v, "    ", "  ")
	if err != nil {
		s.err = err
		return
	}
	sep := ",\n    "
	if s.n == 0 {
		sep = "\n    "
	}
	s.n++
	_, s.err = fmt.Fprintf(s.w, "%s%s", sep, b)
}

// end closes the array and the document, writing members after the array
// in the order given (nil values are left out).
func (s *jsonArrayStream) end(members ...member) error {
	if s.err != nil {
		return s.err
	}
	if s.n > 0 {
		_, s.err = io.WriteString(s.w, "\n  ")
	}
	if s.err == nil {
		_, s.err = io.WriteString(s.w, "]")
	}
	for _, m := range members {
		if s.err != nil || m.value == nil {
			continue
		}
		var b []byte
		if b, s.err = json.MarshalIndent(m.value, "  ", "  "); s.err == nil {
			_, s.err = fmt.Fprintf(s.w, ",\n  %q: %s", m.key, b)
		}
	}
	if s.err == nil {
		_, s.err = io.WriteString(s.w, "\n}\n")
	}
	return s.err
}

// member is a key and value written after a streamed array.
type member struct {
	key   string
	value any
}

// walkPages is the --all walk of a list command: fetch(token) gets one
// page; every item goes to the JSON stream (key names its array) or, page
// by page, to show; tail(total) ends the output (it prints the human
// ending itself, and returns the JSON members written after the array).
// It returns the exit code. The stream starts with the first page, so a
// first call that fails fails as any read does; a failure after it ends
// the document with an "error" member shaped as a failed read's, so what
// was printed stays one valid document.
func walkPages[T any](e *command, key, token string, fetch func(token string) ([]T, string, error), toJSON func(T) any,
	show func(page []T, first bool), tail func(total int) []member) int {
	var stream *jsonArrayStream
	total := 0
	for first := true; ; first = false {
		items, next, err := fetch(token)
		if err != nil {
			if stream == nil {
				return e.fail(err)
			}
			// The document is under way: the error goes to stderr, and
			// into the document as its last member.
			e.cf.json = false
			code := e.fail(err)
			st := status.Convert(err)
			_ = stream.end(member{"error", map[string]any{"code": adminpb.CodeName(st.Code()), "message": st.Message(), "exit_code": code, "after_items": total}})
			return code
		}
		if e.cf.json && stream == nil {
			stream = newJSONArrayStream(e.c.stdout, key)
		}
		total += len(items)
		if stream != nil {
			for _, it := range items {
				stream.add(toJSON(it))
			}
		} else {
			show(items, first)
		}
		if next == "" {
			break
		}
		token = next
	}
	members := tail(total)
	if stream != nil {
		if err := stream.end(members...); err != nil {
			return e.fail(fmt.Errorf("writing the answer: %w", err))
		}
	}
	return exitOK
}

// showRows is a pagedList show that prints each page's rows (row of each
// item) in columns, under header once, above the first rows printed.
func showRows[T any](w io.Writer, header []string, row func(T) []string) func(page []T, first bool) {
	var cols *columns
	return func(page []T, _ bool) {
		if len(page) == 0 {
			return
		}
		var rows [][]string
		if cols == nil {
			cols = &columns{w: w}
			rows = append(rows, header)
		}
		for _, x := range page {
			rows = append(rows, row(x))
		}
		cols.print(rows)
	}
}

// columns prints rows as aligned columns, as a tabwriter with a padding of
// 2 would, except that the widths are fixed by the first rows it prints:
// so pages printed as they arrive line up with the first (a longer cell
// later only pushes its row's next cells right).
type columns struct {
	w      io.Writer
	widths []int
}

func (c *columns) print(rows [][]string) {
	if c.widths == nil {
		for _, r := range rows {
			for i, cell := range r {
				if i >= len(c.widths) {
					c.widths = append(c.widths, 0)
				}
				c.widths[i] = max(c.widths[i], len(cell))
			}
		}
	}
	var b strings.Builder
	for _, r := range rows {
		b.Reset()
		for i, cell := range r {
			b.WriteString(cell)
			if i < len(r)-1 {
				w := 0
				if i < len(c.widths) {
					w = c.widths[i]
				}
				b.WriteString(strings.Repeat(" ", max(w-len(cell), 0)+2))
			}
		}
		b.WriteByte('\n')
		io.WriteString(c.w, b.String())
	}
}

// pagedList is what a list command tells listPages: how to read a page,
// and how to print its items as JSON or as text.
type pagedList[T any] struct {
	cmd, noun string // for the stderr line naming the next page: "rs list", "region servers"
	key       string // the JSON array's name
	fetch     func(token string) ([]T, string, error)
	toJSON    func(T) any
	// pageJSON is the one-page document, with its next_page_token and read.
	pageJSON func(items []T, next string) any
	show     func(page []T, first bool)
	// tail ends the text output: "no <noun>" if total is 0, else the read.
	tail func(total int)
}

// parseList parses a list command's flags (it takes no arguments) and
// checks its page flags; !ok: exit with code.
func (e *command) parseList(args []string, pf *pageFlags) (code int, ok bool) {
	if _, code, ok := e.parse(args, 0, ""); !ok {
		return code, false
	}
	if err := pf.check(); err != nil {
		return e.fail(err), false
	}
	return 0, true
}

// servedTail is a pagedList tail that prints none for an empty list, else
// the read that served it.
func (c *cli) servedTail(rf *readFlags, none string) func(total int) {
	return func(total int) {
		if total == 0 {
			fmt.Fprintln(c.stdout, none)
			return
		}
		c.printServed(rf.served)
	}
}

// listPages runs a list command's paging: with --all, walkPages over every
// page; otherwise the page at --page-token, then the stderr line for the
// next. It returns the exit code.
func listPages[T any](e *command, pf *pageFlags, rf *readFlags, l pagedList[T]) int {
	if pf.all {
		return walkPages(e, l.key, pf.token, l.fetch, l.toJSON, l.show, func(total int) []member {
			if !e.cf.json {
				l.tail(total)
			}
			return []member{{"read", toReadJSON(rf.served)}}
		})
	}
	items, next, err := l.fetch(pf.token)
	if err != nil {
		return e.fail(err)
	}
	if e.cf.json {
		e.c.printJSON(l.pageJSON(items, next))
	} else {
		l.show(items, true)
		if len(items) > 0 || next == "" {
			l.tail(len(items))
		}
	}
	e.c.morePages(l.cmd, l.noun, next)
	return exitOK
}
