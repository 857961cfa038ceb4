package defaults

import (
	"errors"
	"fmt"
)

// Problems gathers what a Validate finds wrong with a configuration, so
// that it names every problem at once rather than only the first.
type Problems struct {
	prefix string
	errs   []error
}

// NewProblems returns an empty list whose errors each begin with prefix
// (e.g. "dispatch: config: ").
func NewProblems(prefix string) *Problems { return &Problems{prefix: prefix} }

// Addf adds one problem, formatted as fmt.Errorf does (so %w wraps).
func (p *Problems) Addf(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf(p.prefix+format, args...))
}

// Err is the problems joined (errors.Join), nil if there are none.
func (p *Problems) Err() error { return errors.Join(p.errs...) }
