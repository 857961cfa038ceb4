package layers

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/baton-dev/baton"

// moduleRoot walks up from the test's directory to go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// packages maps each package directory of the module (relative, slash
// separated) to the module packages its non-test files import: the graph
// `go list -f '{{.Imports}}'` shows. Test files may reach higher (an
// external test of the domain uses the test cluster built on top of it).
func packages(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
			return filepath.SkipDir
		}
		if path != root {
			// A nested module (deploy/, the Helm chart's checks) is
			// not this module's code: its imports are its own.
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		pkg, err := build.Default.ImportDir(path, 0)
		if err != nil {
			if _, none := err.(*build.NoGoError); none {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			rel = ""
		}
		for _, imp := range pkg.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				out[rel] = append(out[rel], strings.TrimPrefix(strings.TrimPrefix(imp, module), "/"))
			}
		}
		if _, ok := out[rel]; !ok {
			out[rel] = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImportsPointDown(t *testing.T) {
	graph := packages(t, moduleRoot(t))
	if len(graph) < 10 {
		t.Fatalf("found only %d packages: the walk is broken", len(graph))
	}
	for pkg, imports := range graph {
		floor := FloorOf(pkg)
		if floor < 0 {
			t.Errorf("package %q is on no floor: add it to layers.Floors (and docs/architecture.md)", pkg)
			continue
		}
		for _, imp := range imports {
			to := FloorOf(imp)
			switch {
			case to < 0:
				// Reported as a package of its own.
			case slices.Contains(Ground, imp) && to == 0:
				// Ground: every floor, 0 included, may import it.
			case to >= floor:
				t.Errorf("%s (floor %d) imports %s (floor %d): imports must point to a lower floor", pkg, floor, imp, to)
			}
		}
	}
}

func TestFloorOf(t *testing.T) {
	for _, tc := range []struct {
		path string
		want int
	}{
		{"proto/adminpb", 0},
		{"store", 1},
		{"cluster", 4},
		{"cluster/domain", 5},
		{"integration/harness", 7},
		{"integration", 8},
		{"integration/chaos", 8},
		{"cmd/node", 8},
		{"cmd/node/bench", 7},
		{"clusterx", -1},
		{"cluster/unknown", -1},
	} {
		if got := FloorOf(tc.path); got != tc.want {
			t.Errorf("FloorOf(%q) = %d, want %d", tc.path, got, tc.want)
		}
	}
}
