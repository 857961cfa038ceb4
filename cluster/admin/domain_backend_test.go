package admin

import (
	"reflect"
	"testing"
)

// TestDomainBackendPassesEveryMethodThrough: the server finds a node's
// optional abilities by asserting its backend to small interfaces
// (appliedWaiter, vouchedReader, fencer, ...). A domain master's backend
// is the node's wrapped by WithDomain, whose embedded Backend hides every
// method Backend does not declare: each of those must be passed through
// by hand, or the agent silently loses what every test on a bare node
// backend exercises (the catch-up before a stream's or a membership call's
// refusal, the standby's word on forwarded reads, both lost once so).
func TestDomainBackendPassesEveryMethodThrough(t *testing.T) {
	if appliedWaiterOf(WithDomain(nodeBackend{}, nil)) == nil {
		t.Error("appliedWaiterOf does not find the node's WaitApplied through the wrapper")
	}
	if appliedWaiterOf(WithDomain(&fakeBackend{}, nil)) != nil {
		t.Error("appliedWaiterOf finds a WaitApplied the wrapped backend lacks")
	}
	// Found through the wrapper by other means: numbererOf and
	// appliedWaiterOf unwrap it (a wrapper that claimed the ability
	// without its node having it would have every carried record fail,
	// or a standby ask the leader only to refuse).
	unwrapped := map[string]bool{"MutateNumbered": true, "WaitApplied": true}
	node, wrapped := reflect.TypeOf(nodeBackend{}), reflect.TypeOf(WithDomain(nodeBackend{}, nil))
	for i := range node.NumMethod() {
		m := node.Method(i)
		if unwrapped[m.Name] {
			continue
		}
		w, ok := wrapped.MethodByName(m.Name)
		if !ok {
			t.Errorf("WithDomain's backend hides nodeBackend.%s: pass it through (domain_endpoint.go)", m.Name)
			continue
		}
		// The receiver aside, the signatures must agree.
		if got, want := w.Type.String(), m.Type.String(); dropReceiver(got) != dropReceiver(want) {
			t.Errorf("WithDomain's %s is %s, nodeBackend's %s", m.Name, got, want)
		}
	}
}

// dropReceiver is a method's func type without its first parameter.
func dropReceiver(sig string) string {
	for i, depth := 0, 0; i < len(sig); i++ {
		switch sig[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 1 {
				return "func(" + sig[i+2:]
			}
		}
		if depth == 0 && i > 4 {
			return "func()" + sig[i+1:]
		}
	}
	return sig
}
