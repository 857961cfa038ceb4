package defaults

import "testing"

func TestProblems(t *testing.T) {
	p := NewProblems("x: ")
	if p.Err() != nil {
		t.Fatalf("empty Problems: %v", p.Err())
	}
	p.Addf("a %d", 1)
	p.Addf("b")
	if got, want := p.Err().Error(), "x: a 1\nx: b"; got != want {
		t.Errorf("Err() = %q, want %q", got, want)
	}
}
