package reqlimit

// The ASCII path of the text checks against the Unicode tables. (Written
// by a reviewer of the change; all held.)

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// tablesInvisible is Invisible by the Unicode tables alone, as it was
// before its ASCII path.
func tablesInvisible(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

func tablesNeedsEscape(s string) bool {
	if !utf8.ValidString(s) {
		return true
	}
	return strings.IndexFunc(s, tablesInvisible) >= 0
}

// TestFirstInvisibleAgreesWithTheTables: every string of one and two
// bytes, and every byte between ASCII text on either side, agrees with
// the tables, for firstInvisible and needsEscape.
func TestFirstInvisibleAgreesWithTheTables(t *testing.T) {
	check := func(s string) {
		t.Helper()
		if got, want := firstInvisible(s), strings.IndexFunc(s, tablesInvisible); got != want {
			t.Fatalf("firstInvisible(%q) = %d, tables %d", s, got, want)
		}
		if got, want := needsEscape(s), tablesNeedsEscape(s); got != want {
			t.Fatalf("needsEscape(%q) = %v, tables %v", s, got, want)
		}
	}
	var b [2]byte
	for i := range 256 {
		b[0] = byte(i)
		check(string(b[:1]))
		check("ab" + string(b[:1]) + "cd")
		for j := range 256 {
			b[1] = byte(j)
			check(string(b[:]))
			check("x" + string(b[:]) + "\x01")
		}
	}
	// Every rune, encoded, after ASCII and before a control.
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		check("abc" + string(r) + "\x7f")
	}
}

// TestFirstInvisibleRandomMixes: random mixes of ASCII, invisible
// runes, multi-byte runes and stray bytes.
func TestFirstInvisibleRandomMixes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	parts := []string{"a", " ", "~", "\x00", "\x1f", "\x7f", "\x80", "\xff", "\xc2", "\xc2\x85", "\u00ad", "é", "\u200b", "\u2028", "\u2029", "\ufeff", "\U000E0001", "日", "\xe2\x80", "\xf0\x9f\x98", "😀", "\ufffd"}
	for range 200_000 {
		var sb strings.Builder
		for range rng.IntN(8) {
			sb.WriteString(parts[rng.IntN(len(parts))])
		}
		s := sb.String()
		if got, want := firstInvisible(s), strings.IndexFunc(s, tablesInvisible); got != want {
			t.Fatalf("firstInvisible(%q) = %d, tables %d", s, got, want)
		}
		if got, want := needsEscape(s), tablesNeedsEscape(s); got != want {
			t.Fatalf("needsEscape(%q) = %v, tables %v", s, got, want)
		}
	}
}

// TestInvisibleASCIIFastPath: the byte-at-a-time path for ASCII says what
// the Unicode tables say, for every rune, and firstInvisible finds what
// strings.IndexFunc with the tables finds, ASCII before, between and
// after other text.
func TestInvisibleASCIIFastPath(t *testing.T) {
	for r := rune(-1); r <= unicode.MaxRune+1; r++ {
		if Invisible(r) != tablesInvisible(r) {
			t.Fatalf("Invisible(%U) = %v, the tables say %v", r, Invisible(r), tablesInvisible(r))
		}
	}
	for _, s := range []string{
		"", "plain ascii", "tab\there", "del\x7f", "nul\x00", "esc\x1b[31m",
		"é then \x1b", "\u202e", "ascii \u200b zero width", "\u2028", "日本語", "日本\x1b語",
		"ok\xffbad utf8", "\x9b c1 as a byte", "\u0085 c1 as a rune", "trailing \u2066",
	} {
		if got, want := firstInvisible(s), strings.IndexFunc(s, tablesInvisible); got != want {
			t.Errorf("firstInvisible(%q) = %d, want %d", s, got, want)
		}
	}
}
