package diag

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/procedure"
	"github.com/baton-dev/baton/store"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name    string
		typ     string
		args    map[string]string
		want    procedure.Procedure
		wantErr string // substring; "" means success
	}{
		{"sleep defaults", "sleep", nil, &Sleep{Steps: 3, Delay: 100 * time.Millisecond}, ""},
		{"sleep args", "sleep", map[string]string{"steps": "5", "delay": "2s"}, &Sleep{Steps: 5, Delay: 2 * time.Second}, ""},
		{"sleep zero", "sleep", map[string]string{"steps": "0", "delay": "0s"}, &Sleep{}, ""},
		{"sleep blanks", "sleep", map[string]string{"steps": " 2 "}, &Sleep{Steps: 2, Delay: DefaultDelay}, ""},
		{"sleep negative steps", "sleep", map[string]string{"steps": "-1"}, nil, "steps=-1 is below 0"},
		{"sleep steps not a number", "sleep", map[string]string{"steps": "three"}, nil, `steps="three" is not a whole number`},
		{"sleep too many steps", "sleep", map[string]string{"steps": "100001"}, nil, "above the limit"},
		{"sleep bad delay", "sleep", map[string]string{"delay": "100"}, nil, "not a Go duration"},
		{"sleep negative delay", "sleep", map[string]string{"delay": "-1s"}, nil, "negative"},
		{"sleep huge delay", "sleep", map[string]string{"delay": "2h"}, nil, "above the limit"},
		{"sleep unknown arg", "sleep", map[string]string{"stpes": "2"}, nil, "unknown argument(s) stpes (known: delay, steps)"},
		{"fail defaults", "fail", nil, &Fail{Steps: 3, FailAt: 2}, ""},
		{"fail args", "fail", map[string]string{"steps": "4", "fail_at": "0"}, &Fail{Steps: 4, FailAt: 0}, ""},
		{"fail with delay", "fail", map[string]string{"delay": "10ms"}, &Fail{Steps: 3, FailAt: 2, Delay: 10 * time.Millisecond}, ""},
		{"fail_at = steps", "fail", map[string]string{"steps": "3", "fail_at": "3"}, nil, "fail_at 3 must be below steps 3"},
		{"fail_at > steps", "fail", map[string]string{"steps": "2", "fail_at": "9"}, nil, "must be below"},
		{"fail zero steps", "fail", map[string]string{"steps": "0"}, nil, "below 1"},
		{"fail negative fail_at", "fail", map[string]string{"fail_at": "-2"}, nil, "below 0"},
		{"fanout defaults", "fanout", nil, &Fanout{Children: 3, Steps: 3, Delay: DefaultDelay}, ""},
		{"fanout args", "fanout", map[string]string{"children": "10", "steps": "1", "delay": "1ms"}, &Fanout{Children: 10, Steps: 1, Delay: time.Millisecond}, ""},
		{"fanout too many children", "fanout", map[string]string{"children": "1001"}, nil, "children=1001 is above the limit 1000"},
		{"fanout negative children", "fanout", map[string]string{"children": "-3"}, nil, "below 0"},
		{"unknown type", "nap", nil, nil, `"nap" (diagnostic types: fail, fanout, sleep)`},
		{"empty type", "", nil, nil, "unknown procedure type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.typ, tc.args)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("New(%q, %v) = %#v, want error containing %q", tc.typ, tc.args, p, tc.wantErr)
				}
				if !errors.Is(err, procedure.ErrInvalid) {
					t.Errorf("error %v does not wrap procedure.ErrInvalid", err)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %q does not contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%q, %v): %v", tc.typ, tc.args, err)
			}
			switch want := tc.want.(type) {
			case *Sleep:
				if got := p.(*Sleep); *got != *want {
					t.Errorf("got %+v, want %+v", *got, *want)
				}
			case *Fail:
				if got := p.(*Fail); *got != *want {
					t.Errorf("got %+v, want %+v", *got, *want)
				}
			case *Fanout:
				if got := p.(*Fanout); *got != *want {
					t.Errorf("got %+v, want %+v", *got, *want)
				}
			}
		})
	}
}

func TestUnknownTypeIsUnknownType(t *testing.T) {
	_, err := New("nope", nil)
	if !errors.Is(err, procedure.ErrUnknownType) {
		t.Fatalf("error %v does not wrap ErrUnknownType", err)
	}
}

func TestRun(t *testing.T) {
	reg := procedure.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := Register(reg); err == nil {
		t.Fatal("second Register succeeded")
	}
	if got := reg.Types(); strings.Join(got, ",") != "fail,fanout,sleep" {
		t.Fatalf("registered %v", got)
	}
	mem := store.NewMemStore()
	x, err := procedure.New(procedure.Config{RecordFormat: version.Newest, Store: mem, Registry: reg, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Stop(context.Background()) })

	for _, tc := range []struct {
		typ       string
		args      map[string]string
		state     procedure.State
		result    string
		errPart   string
		nChildren int
		effects   []string // effect counts of steps 0..n-1 in the domain state
	}{
		{typ: "sleep", args: map[string]string{"steps": "3", "delay": "10ms"}, state: procedure.Success, result: "slept 3 steps", effects: []string{"1", "1", "1"}},
		{typ: "sleep", args: map[string]string{"steps": "0"}, state: procedure.Success, result: "slept 0 steps"},
		{typ: "sleep", args: map[string]string{"steps": "50", "delay": "0s"}, state: procedure.Success, result: "slept 50 steps"},
		{typ: "fail", args: map[string]string{"steps": "4", "fail_at": "2"}, state: procedure.RolledBack, errPart: "failing as asked at step 2 of 4", effects: []string{"0", "0"}},
		{typ: "fail", args: map[string]string{"steps": "1", "fail_at": "0", "delay": "5ms"}, state: procedure.RolledBack, errPart: "at step 0 of 1"},
		{typ: "fanout", args: map[string]string{"children": "5", "steps": "2", "delay": "5ms"}, state: procedure.Success, result: "5 children done", nChildren: 5},
		{typ: "fanout", args: map[string]string{"children": "0"}, state: procedure.Success, result: "0 children done"},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			p, err := New(tc.typ, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			id, err := x.Submit(p, procedure.SubmitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			info, err := x.Wait(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			for step, want := range tc.effects {
				if v, _ := mem.Value(EffectKey(id, step)); string(v) != want {
					t.Errorf("effect of step %d: %q, want %q", step, v, want)
				}
			}
			if v, ok := mem.Value(EffectKey(id, len(tc.effects))); len(tc.effects) > 0 && ok && string(v) != "0" {
				t.Errorf("effect beyond the last step: %q", v)
			}
			if info.State != tc.state {
				t.Fatalf("state %v (error %q), want %v", info.State, info.Error, tc.state)
			}
			if string(info.Result) != tc.result {
				t.Errorf("result %q, want %q", info.Result, tc.result)
			}
			if !strings.Contains(info.Error, tc.errPart) {
				t.Errorf("error %q does not contain %q", info.Error, tc.errPart)
			}
			if len(info.Children) != tc.nChildren {
				t.Errorf("%d children, want %d", len(info.Children), tc.nChildren)
			}
			// Children of a finished root are deleted with its success.
		})
	}
}

// TestDocs holds the help texts' description to what New accepts: every
// type New builds is described, and each described argument is known to
// it (with its default, where that is a value), and no other.
func TestDocs(t *testing.T) {
	var names []string
	for _, d := range Docs() {
		names = append(names, d.Name)
		args := map[string]string{}
		for _, a := range d.Args {
			if a.Name == "fail_at" {
				args[a.Name] = "0"
				continue
			}
			args[a.Name] = a.Default
		}
		if _, err := New(d.Name, args); err != nil {
			t.Errorf("%s with its documented defaults: %v", d.Name, err)
		}
		_, err := New(d.Name, map[string]string{"zz_undocumented": "1"})
		if err == nil || !strings.Contains(err.Error(), "(known: ") {
			t.Fatalf("%s: %v", d.Name, err)
		}
		known := err.Error()[strings.Index(err.Error(), "(known: ")+len("(known: "):]
		var want []string
		for _, a := range d.Args {
			want = append(want, a.Name)
		}
		slices.Sort(want)
		if got := strings.TrimSuffix(known, ")"); got != strings.Join(want, ", ") {
			t.Errorf("%s: New knows %s, the docs %v", d.Name, got, want)
		}
	}
	if !slices.Equal(names, Types()) {
		t.Errorf("documented %v, types %v", names, Types())
	}
}
