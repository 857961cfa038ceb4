package reqlimit

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

var update = flag.Bool("update", false, "rewrite testdata/limits.golden from the limits in force")

// TestLimitsGolden pins the effective limit of every request field (full
// name, then Bytes, Items, Total, Ident): moving where the limits are
// declared must not change one, and changing one on purpose shows in the
// diff of testdata/limits.golden (go test -run TestLimitsGolden -update).
func TestLimitsGolden(t *testing.T) {
	var lines []string
	limitedFields(func(fd protoreflect.FieldDescriptor) {
		f := limitOf(fd)
		lines = append(lines, fmt.Sprintf("%s bytes=%d items=%d total=%d ident=%v", fd.FullName(), f.Bytes, f.Items, f.Total, f.Ident))
	})
	sort.Strings(lines)
	got := strings.Join(lines, "\n") + "\n"
	path := filepath.Join("testdata", "limits.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestLimitsGolden -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("request limits differ from %s:\n%s", path, diffLines(string(want), got))
	}
}

// diffLines lists the lines only in want (-) and only in got (+).
func diffLines(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}
