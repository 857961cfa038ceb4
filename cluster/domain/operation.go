package domain

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/procedure"
)

// The domain's operations live one to a file, after CockroachDB's
// batcheval/cmd_*.go: a file holds its procedure, the validation of the
// request that starts it, and, in its init, the registration of both
// (registerType, registerBuilder). Adding an operation adds a file; nothing
// here or elsewhere lists them. The files therefore open alike (a type
// name, an init, the states): that likeness is the choice, not a copy to
// factor out.

// procedureTypes are the procedure types registered by the operations'
// files, by type name, with their versions.
var procedureTypes = map[string]registeredType{}

type registeredType struct {
	opts    procedure.TypeOptions
	factory func() procedure.Procedure
}

// registerType adds procedure type name, made by f, to those Register
// adds, at version 1. It is called from init: a name taken twice is a
// programming error caught at start, before anything could be stored
// under either.
func registerType(name string, f func() procedure.Procedure) {
	registerTypeWith(name, procedure.TypeOptions{Version: 1}, f)
}

// registerTypeWith is registerType for a type with newer state versions
// (procedure.Registry.RegisterWith): one an older release cannot load is
// written only from the cluster version that every member reads.
func registerTypeWith(name string, opts procedure.TypeOptions, f func() procedure.Procedure) {
	if _, dup := procedureTypes[name]; dup {
		panic(fmt.Sprintf("domain: procedure type %q registered twice", name))
	}
	procedureTypes[name] = registeredType{opts: opts, factory: f}
}

// Register adds the domain's procedure types to reg.
func Register(reg *procedure.Registry) error {
	for _, name := range slices.Sorted(maps.Keys(procedureTypes)) {
		t := procedureTypes[name]
		if err := reg.RegisterWith(name, t.opts, t.factory); err != nil {
			return err
		}
	}
	return nil
}

// A builder validates the request of an admin call that starts a domain
// procedure, and builds that procedure. It runs on whichever master the
// call reached, a standby included, so that bad input is refused without
// a trip to the leader: it reads nothing but the local replicated state.
type builder func(d *Domain, req proto.Message) (procedure.Procedure, error)

// builders are the registered builders, by the full gRPC name of the admin
// method whose request they take (adminpb.Admin_*_FullMethodName).
var builders = map[string]builder{}

// registerBuilder makes build the builder of the admin method method, whose
// request is an R. It is called from init, as registerType.
func registerBuilder[R proto.Message](method string, build func(d *Domain, req R) (procedure.Procedure, error)) {
	if _, dup := builders[method]; dup {
		panic(fmt.Sprintf("domain: %s has two builders", method))
	}
	builders[method] = func(d *Domain, req proto.Message) (procedure.Procedure, error) {
		r, ok := req.(R)
		if !ok {
			return nil, fmt.Errorf("%s takes a %T request, not a %T", method, *new(R), req)
		}
		return build(d, r)
	}
}

// Build validates req, the request of the admin method method (its full
// gRPC name), and builds the procedure it asks for. Errors wrap
// procedure.ErrInvalid for bad input and procedure.ErrNotFound for what
// the request names that does not exist.
func (d *Domain) Build(method string, req proto.Message) (procedure.Procedure, error) {
	b, ok := builders[method]
	if !ok {
		return nil, fmt.Errorf("%s starts no domain procedure", method)
	}
	return b(d, req)
}

// BuildMethods lists, sorted, the admin methods Build builds procedures
// for.
func BuildMethods() []string { return slices.Sorted(maps.Keys(builders)) }

// BuildMethods is the package's BuildMethods, for the admin server: it
// serves each of these methods without a handler of its own, and refuses to
// start if one is not a method whose rule says it starts a procedure.
func (d *Domain) BuildMethods() []string { return BuildMethods() }
