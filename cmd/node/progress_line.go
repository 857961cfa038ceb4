package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/baton-dev/baton/proto/adminpb"
)

// progressLine shows how far a waited-for procedure is. On a terminal it
// is one line, rewritten in place as the procedure moves (and wiped
// before any other line is printed); elsewhere (a pipe, a log) it is a
// plain line, at most one a second and one at each change of state, so a
// 2,000-region create does not print 2,000 lines.
type progressLine struct {
	out      io.Writer
	id       uint64
	terminal bool
	shown    bool // a terminal line is on screen
	last     string
	lastAt   time.Time
}

// plainEvery is how often a plain progress line may be printed.
const plainEvery = time.Second

func newProgressLine(out io.Writer, id uint64) *progressLine {
	return &progressLine{out: out, id: id, terminal: isTerminal(out)}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressText is the progress of p in words, "" if it says nothing:
// "3 of 20 steps", and with the reason it waits, "3 of 20 steps; waiting
// for lock table default:t (exclusive) held by procedure 4 (CreateTable)".
func progressText(p *adminpb.Procedure, withReason bool) string {
	var parts []string
	if pr := p.GetProgress(); pr != nil && pr.GetUnit() != "" {
		if pr.GetTotal() > 0 {
			parts = append(parts, fmt.Sprintf("%d of %d %s", pr.GetDone(), pr.GetTotal(), unitFor(pr.GetTotal(), pr.GetUnit())))
		} else {
			parts = append(parts, fmt.Sprintf("%d %s", pr.GetDone(), unitFor(pr.GetDone(), pr.GetUnit())))
		}
	}
	if w := p.GetWaitingFor(); withReason && w != "" && w != "running" && w != "queued" {
		parts = append(parts, w)
	}
	return strings.Join(parts, "; ")
}

// plainSuffix is what a plain state line adds of p's progress, and counts
// as the last plain progress line printed.
func (l *progressLine) plainSuffix(p *adminpb.Procedure) string {
	if l.terminal {
		return ""
	}
	text := progressText(p, false)
	l.last, l.lastAt = text, time.Now()
	if text == "" {
		return ""
	}
	return " " + text
}

// show prints p's progress if it changed: on a terminal the one line,
// with the reason it waits; elsewhere a plain line if the last is old
// enough (the reasons go to stderr, and state changes print their own
// line).
func (l *progressLine) show(p *adminpb.Procedure) {
	text := progressText(p, l.terminal)
	if text == "" || text == l.last {
		return
	}
	now := time.Now()
	if l.terminal {
		fmt.Fprintf(l.out, "\r\033[K  procedure %d %s: %s", l.id, p.GetState(), text)
		l.shown = true
	} else {
		if now.Sub(l.lastAt) < plainEvery {
			return
		}
		fmt.Fprintf(l.out, "  %s %s %s\n", now.Format("15:04:05.000"), p.GetState(), text)
	}
	l.last, l.lastAt = text, now
}

// clear wipes the terminal line before another line is printed.
func (l *progressLine) clear() {
	if l.shown {
		fmt.Fprint(l.out, "\r\033[K")
		l.shown = false
		l.last = ""
	}
}

// unitFor is unit (a plural: "regions open") as said of n: singular for
// one ("region open").
func unitFor(n int64, unit string) string {
	if n != 1 {
		return unit
	}
	first, rest, _ := strings.Cut(unit, " ")
	if first == "children" {
		first = "child"
	} else {
		first = strings.TrimSuffix(first, "s")
	}
	if rest == "" {
		return first
	}
	return first + " " + rest
}
