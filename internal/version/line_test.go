package version

import "testing"

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want Line
		bad  bool
	}{
		{v: "0.1.0", want: Line{0, 1}},
		{v: "0.2.0-dev", want: Line{0, 2}},
		{v: "v0.2.0", want: Line{0, 2}},
		{v: "v0.2.1-0.20260101000000-abcdef012345", want: Line{0, 2}},
		{v: "1.10.3+meta", want: Line{1, 10}},
		{v: "", bad: true},
		{v: "dev", bad: true},
		{v: "0.2", bad: true},
		{v: "0.x.0", bad: true},
		{v: "0..0", bad: true},
		{v: "0.-1.0", bad: true},
	} {
		got, err := ParseLine(tc.v)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParseLine(%q) = %v, %v; want %v, bad %v", tc.v, got, err, tc.want, tc.bad)
		}
	}
	if dev, err := ParseLine(Dev); err != nil || dev != CurrentLine() {
		t.Errorf("Dev %q is line %v (%v), Release %q line %v", Dev, dev, err, Release, CurrentLine())
	}
}

func TestLineOrderAndPrevious(t *testing.T) {
	if (Line{0, 1}).Compare(Line{0, 2}) != -1 || (Line{1, 0}).Compare(Line{0, 9}) != 1 || (Line{0, 2}).Compare(Line{0, 2}) != 0 {
		t.Error("Compare misorders lines")
	}
	for _, tc := range []struct{ l, prev Line }{
		{Line{0, 2}, Line{0, 1}},
		{Line{1, 0}, Line{0, 0}},
		{Line{0, 0}, Line{0, 0}},
	} {
		if got := tc.l.Previous(); got != tc.prev {
			t.Errorf("%v.Previous() = %v, want %v", tc.l, got, tc.prev)
		}
	}
}
