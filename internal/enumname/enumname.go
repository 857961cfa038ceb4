// Package enumname looks up the names an enum's String method prints in
// one table per type. The names themselves stay beside their constants
// (they show in logs, JSON and the CLI, and some on disk); only the lookup,
// with its range check and its fallback for a value without a name, is
// written once, here.
package enumname

import "fmt"

type integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// Lookup returns names[v] and true when v indexes a non-empty entry of
// names; "" and false otherwise. An entry left "" marks a value without a
// name (a type whose constants start at 1, say).
func Lookup[T integer](v T, names []string) (string, bool) {
	if v < 0 || uint64(v) >= uint64(len(names)) || names[v] == "" {
		return "", false
	}
	return names[v], true
}

// Format returns v's name (see Lookup), or, for a value without one,
// format (holding one %d) applied to v as a plain integer: "mode(7)".
func Format[T integer](v T, names []string, format string) string {
	if name, ok := Lookup(v, names); ok {
		return name
	}
	if v < 0 {
		return fmt.Sprintf(format, int64(v))
	}
	return fmt.Sprintf(format, uint64(v))
}
