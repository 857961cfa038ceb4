package version

import (
	"strings"
	"testing"
)

func TestParseFormatStamp(t *testing.T) {
	for _, tc := range []struct {
		stamp string
		want  Format
		bad   string // in the error
	}{
		{stamp: "", want: 0},
		{stamp: "3", want: 3},
		{stamp: "2", bad: "not above this tree's format 2"},
		{stamp: "1", bad: "not above"},
		{stamp: "0", bad: "not above"},
		{stamp: "-3", bad: "not a format level"},
		{stamp: "three", bad: "not a format level"},
		{stamp: "1001", bad: "above 1000"},
	} {
		got, err := parseFormatStamp(tc.stamp)
		if got != tc.want || (err == nil) != (tc.bad == "") || (err != nil && !strings.Contains(err.Error(), tc.bad)) {
			t.Errorf("parseFormatStamp(%q) = %v, %v; want %v, error with %q", tc.stamp, got, err, tc.want, tc.bad)
		}
	}
}

// A plain build (the one this test runs in) is unaffected by the hook.
func TestPlainBuildHasNoStamp(t *testing.T) {
	if Ceiling() != MaxFormat || StampErr() != nil || StampVersion(Dev) != Dev || Current("").MaxFormat != MaxFormat {
		t.Errorf("plain build: Ceiling %v, StampErr %v, StampVersion %q, Current %+v", Ceiling(), StampErr(), StampVersion(Dev), Current(""))
	}
	if got := (MaxFormat + 1).String(); !strings.Contains(got, "a release newer than") {
		t.Errorf("MaxFormat+1 = %q", got)
	}
}

func TestStampedBuild(t *testing.T) {
	defer func(f Format) { stampedFormat = f }(stampedFormat)
	stampedFormat = MaxFormat + 1
	if Ceiling() != MaxFormat+1 || Current("x").MaxFormat != MaxFormat+1 {
		t.Errorf("stamped: Ceiling %v, Current %+v", Ceiling(), Current("x"))
	}
	for v, want := range map[string]string{"0.2.0-dev": "0.2.0-dev+format3", "0.2.0+meta": "0.2.0+meta.format3"} {
		if got := StampVersion(v); got != want {
			t.Errorf("StampVersion(%q) = %q, want %q", v, got, want)
		}
		if _, err := ParseLine(StampVersion(v)); err != nil {
			t.Error(err)
		}
	}
	if got := (MaxFormat + 1).String(); got != "format 3 (this test build's stamp)" {
		t.Errorf("stamped level: %q", got)
	}
}
