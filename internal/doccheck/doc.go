// Package doccheck holds the test that keeps the library's exported
// identifiers documented (procedure, procedure/proceduretest, store,
// scheduler): `go doc` of each must say what it is.
package doccheck
