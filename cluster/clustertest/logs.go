package clustertest

import (
	"io"
	"os"
	"sort"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/baton-dev/baton/internal/syncbuf"
)

// logSet holds a buffer per component. With BATON_TEST_LOG set, the
// components also log to stderr, at that level (any value that is not a
// level name means debug), for watching a test as it runs.
type logSet struct {
	level  hclog.Level
	stderr bool
	mu     sync.Mutex
	bufs   map[string]*syncbuf.Buffer
}

func newLogSet(level hclog.Level) *logSet {
	s := &logSet{level: level, bufs: map[string]*syncbuf.Buffer{}}
	if v := os.Getenv("BATON_TEST_LOG"); v != "" {
		s.stderr = true
		if s.level = hclog.LevelFromString(v); s.level == hclog.NoLevel {
			s.level = hclog.Debug
		}
	}
	return s
}

// logger returns name's logger; a restarted component appends to the
// buffer of its earlier incarnations.
func (s *logSet) logger(name string) hclog.Logger {
	s.mu.Lock()
	b := s.bufs[name]
	if b == nil {
		b = &syncbuf.Buffer{}
		s.bufs[name] = b
	}
	s.mu.Unlock()
	var out io.Writer = b
	if s.stderr {
		out = io.MultiWriter(b, os.Stderr)
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: s.level, Output: out})
}

func (s *logSet) text(name string) string {
	s.mu.Lock()
	b := s.bufs[name]
	s.mu.Unlock()
	if b == nil {
		return ""
	}
	return b.String()
}

// print logs the tail (at most tail bytes) of every buffer, by name.
func (s *logSet) print(t testing.TB, tail int) {
	s.mu.Lock()
	names := make([]string, 0, len(s.bufs))
	for n := range s.bufs {
		names = append(names, n)
	}
	s.mu.Unlock()
	sort.Strings(names)
	for _, n := range names {
		text := s.text(n)
		if text == "" {
			continue
		}
		if len(text) > tail {
			text = "...\n" + text[len(text)-tail:]
		}
		t.Logf("log of %s (tail):\n%s", n, text)
	}
}
