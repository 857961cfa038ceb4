package procedure

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/baton-dev/baton/internal/syncbuf"
	"github.com/baton-dev/baton/store"
)

// logLines parses the JSON lines hclog wrote to out.
func logLines(t *testing.T, out *syncbuf.Buffer) []map[string]any {
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// TestStepLogger checks that what a step and its rollback log through
// Context.Logger names the procedure, as the sub-logger made for every
// step did before it was made on first use, and that its level follows
// the executor's.
func TestStepLogger(t *testing.T) {
	var out syncbuf.Buffer // the executor's workers write it while the test reads it
	base := hclog.New(&hclog.LoggerOptions{Output: &out, JSONFormat: true, Level: hclog.Info})
	const fid = "steplog"
	var levels []bool
	funcs.Store(fid, func(ctx *Context) (Step, error) {
		levels = append(levels, ctx.Logger.IsInfo(), ctx.Logger.IsDebug())
		ctx.Logger.Debug("not shown")
		ctx.Logger.With("extra", 1).Info("test step ran")
		return Step{}, errors.New("fail to roll back")
	})
	rollbacks.Store(fid, func(ctx *Context) error {
		ctx.Logger.Info("test rollback ran")
		return nil
	})
	t.Cleanup(func() { funcs.Delete(fid); rollbacks.Delete(fid) })
	h := startExecutor(t, store.NewMemStore(), newDomain(), func(c *Config) { c.Logger = base })
	id := h.submit(&funcProc{ID: fid}, SubmitOptions{})
	if info := h.wait(id); info.State != RolledBack {
		t.Fatalf("state %s, want %s", info.State, RolledBack)
	}
	if want := []bool{true, false}; len(levels) != 2 || levels[0] != want[0] || levels[1] != want[1] {
		t.Errorf("IsInfo, IsDebug = %v, want %v", levels, want)
	}
	got := map[string]map[string]any{}
	for _, l := range logLines(t, &out) {
		if m, _ := l["@message"].(string); m == "test step ran" || m == "test rollback ran" || m == "not shown" {
			got[m] = l
		}
	}
	if _, ok := got["not shown"]; ok {
		t.Errorf("a debug line was written at level info")
	}
	for msg, want := range map[string]map[string]any{
		"test step ran":     {"proc_id": float64(id), "type": "func", "extra": float64(1), "@module": "executor"},
		"test rollback ran": {"proc_id": float64(id), "type": "func", "rollback": true, "@module": "executor"},
	} {
		l, ok := got[msg]
		if !ok {
			t.Errorf("no %q line", msg)
			continue
		}
		for k, v := range want {
			if l[k] != v {
				t.Errorf("%q: %s = %v, want %v", msg, k, l[k], v)
			}
		}
	}
}
