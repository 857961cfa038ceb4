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
	// Found through the wrapper by other means: numbererOf (MutateNumbered,
	// and SetFolder beside it) and appliedWaiterOf unwrap it (a wrapper
	// that claimed the ability without its node having it would have
	// every carried record fail, or a standby ask the leader only to
	// refuse).
	unwrapped := map[string]bool{"MutateNumbered": true, "SetFolder": true, "WaitApplied": true}
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
		if !sameSignature(w.Type, m.Type) {
			t.Errorf("WithDomain's %s is %s, nodeBackend's %s", m.Name, w.Type, m.Type)
		}
	}
}

// sameSignature says methods a and b (receiver first) take and return the
// same types, their receivers aside.
func sameSignature(a, b reflect.Type) bool {
	if a.NumIn() != b.NumIn() || a.NumOut() != b.NumOut() || a.IsVariadic() != b.IsVariadic() {
		return false
	}
	for i := 1; i < a.NumIn(); i++ {
		if a.In(i) != b.In(i) {
			return false
		}
	}
	for i := range a.NumOut() {
		if a.Out(i) != b.Out(i) {
			return false
		}
	}
	return true
}
