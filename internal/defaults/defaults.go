// Package defaults fills the unset fields of a Config with their defaults.
// Each package's withDefaults says, field by field, which default applies;
// this package only says what "unset" means, so that the rule reads the
// same everywhere: Set for fields whose zero value means unset, Positive for
// those where any value below one does.
package defaults

// Set sets *field to def if *field is its type's zero value (0, "", nil).
func Set[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// Positive sets *field to def unless *field is positive.
func Positive[T number](field *T, def T) {
	if *field <= 0 {
		*field = def
	}
}

type number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~float32 | ~float64
}
