package version

import (
	"errors"
	"strings"
	"testing"
)

func TestFormatNamesItsRelease(t *testing.T) {
	for _, tc := range []struct {
		f    Format
		want string
		ok   bool
	}{
		{Format1, "0.1.0", true},
		{Format2, "0.2.0", true},
		{0, "", false},
		{MaxFormat + 1, "", false},
	} {
		if got, ok := IntroducedIn(tc.f); got != tc.want || ok != tc.ok {
			t.Errorf("IntroducedIn(%d) = %q, %v; want %q, %v", tc.f, got, ok, tc.want, tc.ok)
		}
	}
	if got := Format2.String(); got != "format 2 (0.2.0)" {
		t.Errorf("Format2 = %q", got)
	}
	if got := Format(7).String(); !strings.Contains(got, "newer than "+Release) {
		t.Errorf("Format(7) = %q", got)
	}
	if _, ok := IntroducedIn(MaxFormat); !ok || MinFormat > MaxFormat || Release+"-dev" != Dev {
		t.Errorf("MaxFormat %d has no release, or MinFormat %d > MaxFormat", MaxFormat, MinFormat)
	}
}

func TestReportRoundTrip(t *testing.T) {
	for _, b := range []Build{Current(""), Current("v0.2.0"), {Version: "9.0.0", MaxFormat: 9}} {
		got, err := DecodeReport(EncodeReport(b))
		if err != nil || got != b {
			t.Errorf("DecodeReport(EncodeReport(%+v)) = %+v, %v", b, got, err)
		}
	}
	if Current("").Version != Dev {
		t.Errorf("Current(\"\") = %+v", Current(""))
	}
	for _, f := range []Format{Format1, Format2, 9} {
		got, err := DecodeClusterFormat(EncodeClusterFormat(f))
		if err != nil || got != f {
			t.Errorf("DecodeClusterFormat(EncodeClusterFormat(%d)) = %d, %v", f, got, err)
		}
	}
}

// A value that cannot be trusted is an error, never a level: the caller
// counts the member as Unreported (a report) or refuses (a cluster
// version).
func TestBadRecords(t *testing.T) {
	for _, bad := range []string{
		"", "garbage", "{", "2", `{"record":1}`, `{"record":1,"version":"0.2.0","max_format":0}`,
		`{"record":2,"version":"0.3.0","max_format":3}`, `{"record":1,"max_format":-1}`,
		`{"record":1,"max_format":"2"}`,
	} {
		if b, err := DecodeReport([]byte(bad)); !errors.Is(err, ErrBadRecord) {
			t.Errorf("DecodeReport(%q) = %+v, %v; want ErrBadRecord", bad, b, err)
		}
	}
	for _, bad := range []string{"", "2", `{"record":1}`, `{"record":1,"format":0}`, `{"record":3,"format":2}`, `{"format":2}`, strings.Repeat("x", 1000)} {
		f, err := DecodeClusterFormat([]byte(bad))
		if !errors.Is(err, ErrBadRecord) {
			t.Errorf("DecodeClusterFormat(%q) = %d, %v; want ErrBadRecord", bad, f, err)
		}
		if err != nil && len(err.Error()) > 200 {
			t.Errorf("error not bounded: %d bytes", len(err.Error()))
		}
	}
}

func TestNextNeverLowers(t *testing.T) {
	for _, tc := range []struct {
		committed Format
		members   []Format
		want      Format
	}{
		{Format1, []Format{2, 2, 2}, 2},
		{Format1, []Format{2, 1, 2}, 1},
		{Format2, []Format{2, 1, 2}, 2}, // a member at 1 joined later
		{Format2, nil, 2},
		{Format1, []Format{9, 2}, 2}, // a newer member does not lift the others
		{Format1, []Format{9}, 9},
	} {
		if got := Next(tc.committed, tc.members); got != tc.want {
			t.Errorf("Next(%d, %v) = %d, want %d", tc.committed, tc.members, got, tc.want)
		}
	}
}

func TestCheckReadable(t *testing.T) {
	if err := CheckReadable(Format2, MaxFormat); err != nil {
		t.Fatal(err)
	}
	err := CheckReadable(Format2, Format1)
	if err == nil || !strings.Contains(err.Error(), "format 2 (0.2.0)") || !strings.Contains(err.Error(), "format 1 (0.1.0)") {
		t.Fatalf("CheckReadable(2, 1) = %v; want both versions named", err)
	}
	err = CheckReadable(9, MaxFormat)
	if err == nil || !strings.Contains(err.Error(), "format 9") || !strings.Contains(err.Error(), "a newer binary") {
		t.Fatalf("CheckReadable(9, max) = %v", err)
	}
}

func TestGate(t *testing.T) {
	var none Gate
	if !none.Allows(Format1) || none.Allows(Format2) {
		t.Error("a nil gate must allow format 1 only")
	}
	at2 := Gate(func() Format { return Format2 })
	if !at2.Allows(Format2) || at2.Allows(Format2+1) {
		t.Error("a gate at 2 allows 1 and 2, not 3")
	}
}

// A build that says no level counts as Unreported; one that says a level
// counts as it. That is the rule the leader's raise and its probes of the
// members applied inline before, max(level, Format1), for every level.
func TestCounted(t *testing.T) {
	if got := (Build{}).Counted(); got != Unreported.MaxFormat {
		t.Errorf("a build saying no level counts as %v, want Unreported's %v", got, Unreported.MaxFormat)
	}
	for _, f := range []Format{0, Format1, Format2, MaxFormat, 9, 1<<32 - 1} {
		if got, was := (Build{Version: "x", MaxFormat: f}).Counted(), max(f, Format1); got != was {
			t.Errorf("level %d counts as %v, was %v", uint32(f), got, was)
		}
	}
}
