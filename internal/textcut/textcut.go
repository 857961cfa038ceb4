// Package textcut bounds strings in bytes without splitting a UTF-8
// character: what audit records, procedure summaries and refusal reports
// need before they store or send text of any length.
package textcut

import "unicode/utf8"

// Prefix is s cut to at most max bytes, at the start of a rune: s itself
// when it fits.
func Prefix(s string, max int) string {
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// Ellipsis is s cut to at most max bytes, "…" included, at the start of a
// rune: s itself when it fits.
func Ellipsis(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return Prefix(s, max-len("…")) + "…"
}
