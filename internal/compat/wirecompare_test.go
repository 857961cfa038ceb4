package compat_test

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// The rules a current schema must keep for a released one, so that peers
// of both talk: a rolling upgrade runs them side by side in both
// directions (a current leader dispatches to a 0.1.0 region server and
// the other way round, a 0.1.0 follower applies Raft commands a current
// leader wrote, and back during a downgrade), so every rule must hold for
// old→new and new→old alike.
//
// Only the wire counts: numbers, wire types, cardinality, and the type
// names a field or a gRPC method carries. Names of fields and enum values,
// and their JSON names, are not on the wire (peers never exchange
// protojson; the one use, the audit record's human-readable args, is a
// string written by one node), so renaming them passes.
//
// Field kinds: the same kind, or one of protobuf's documented wire-
// compatible groups (wireGroup). Within the varint group a value outside
// the narrower type's range is truncated as a C cast would: the peers
// still parse each other, which is what this checks; whether a widened
// field's values may reach such a peer is the change's own to argue.
// Refused although protobuf calls them compatible under conditions no
// schema can prove:
//   - string ↔ bytes: Go refuses a proto3 string that is not UTF-8, so a
//     peer reading bytes as string fails on the first invalid byte, and
//     in a rolling upgrade both sides read what the other wrote;
//   - message ↔ bytes: holds only if the bytes are that message encoded;
//   - enum ↔ integer: the enum type name check would have to give way,
//     and an open enum's unknown numbers read differently.

// wireGroup names the kinds that encode alike, so a field may move between
// those of one group without either side misparsing the other's messages.
func wireGroup(k protoreflect.Kind) string {
	switch k {
	case protoreflect.Int32Kind, protoreflect.Uint32Kind, protoreflect.Int64Kind, protoreflect.Uint64Kind, protoreflect.BoolKind:
		return "varint"
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return "zigzag"
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return "fixed32"
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return "fixed64"
	default:
		return k.String() // a group of its own
	}
}

// wireResolver finds a descriptor by full name: *protoregistry.Files,
// including protoregistry.GlobalFiles.
type wireResolver interface {
	FindDescriptorByName(protoreflect.FullName) (protoreflect.Descriptor, error)
}

// compareWire lists what of release's schemas cur breaks, one line each,
// naming the message, enum or service and the field, value or method.
// Files of package google.protobuf are skipped: the release does not own
// them.
func compareWire(release *protoregistry.Files, cur wireResolver) []string {
	var c wireComparison
	c.cur = cur
	release.RangeFiles(func(f protoreflect.FileDescriptor) bool {
		if strings.HasPrefix(string(f.Package()), "google.protobuf") {
			return true
		}
		c.messages(f.Messages())
		c.enums(f.Enums())
		for i := range f.Services().Len() {
			c.service(f.Services().Get(i))
		}
		return true
	})
	return c.problems
}

type wireComparison struct {
	cur      wireResolver
	problems []string
}

func (c *wireComparison) fail(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func (c *wireComparison) messages(ms protoreflect.MessageDescriptors) {
	for i := range ms.Len() {
		m := ms.Get(i)
		if m.IsMapEntry() {
			continue // compared through its map field: its name follows the field's
		}
		c.message(m)
	}
}

func (c *wireComparison) enums(es protoreflect.EnumDescriptors) {
	for i := range es.Len() {
		c.enum(es.Get(i))
	}
}

func (c *wireComparison) message(old protoreflect.MessageDescriptor) {
	d, err := c.cur.FindDescriptorByName(old.FullName())
	cur, ok := d.(protoreflect.MessageDescriptor)
	if err != nil || !ok {
		c.fail("message %s: gone (a peer of the release sends or expects it by this name)", old.FullName())
		return
	}
	for i := range old.Fields().Len() {
		c.field(old.Fields().Get(i), cur)
	}
	// A number the release reserved was retired before it: using it again
	// would give a new meaning to what an older peer may still send.
	for i := range cur.Fields().Len() {
		if f := cur.Fields().Get(i); old.ReservedRanges().Has(f.Number()) {
			c.fail("message %s field %d: reserved in the release, now used by %s", old.FullName(), f.Number(), f.Name())
		}
	}
	c.messages(old.Messages())
	c.enums(old.Enums())
}

func (c *wireComparison) field(old protoreflect.FieldDescriptor, in protoreflect.MessageDescriptor) {
	at := fmt.Sprintf("message %s field %d (%s)", in.FullName(), old.Number(), old.Name())
	cur := in.Fields().ByNumber(old.Number())
	if cur == nil {
		if !in.ReservedRanges().Has(old.Number()) {
			c.fail("%s: removed and its number not reserved (a later field could reuse it with a meaning the release's peers misread)", at)
		}
		return
	}
	switch {
	case old.IsMap() != cur.IsMap():
		c.fail("%s: map %v, now map %v", at, old.IsMap(), cur.IsMap())
		return
	case old.IsMap():
		c.value(at+" key", old.MapKey(), cur.MapKey())
		c.value(at+" value", old.MapValue(), cur.MapValue())
	case old.IsList() != cur.IsList():
		c.fail("%s: %s, now %s", at, cardinality(old), cardinality(cur))
	default:
		c.value(at, old, cur)
	}
	c.oneof(at, old, cur, in)
}

// oneof flags a field that entered or left a oneof, or that no longer
// shares one with a field it shared one with in the release: setting one
// member clears the others, so the peers would disagree on which fields a
// message holds. A oneof's name is not on the wire, and a new field may
// join a oneof (the release's peers keep it as unknown).
func (c *wireComparison) oneof(at string, old, cur protoreflect.FieldDescriptor, in protoreflect.MessageDescriptor) {
	o, n := realOneof(old), realOneof(cur)
	switch {
	case o == nil && n == nil:
	case o == nil:
		c.fail("%s: in no oneof, now in oneof %s", at, n.Name())
	case n == nil:
		c.fail("%s: in oneof %s, now in none", at, o.Name())
	default:
		for i := range o.Fields().Len() {
			sib := o.Fields().Get(i)
			if cs := in.Fields().ByNumber(sib.Number()); cs != nil && realOneof(cs) != n {
				c.fail("%s: in oneof %s with field %d, now apart from it", at, o.Name(), sib.Number())
			}
		}
	}
}

// value compares what one field (or a map's key or value) holds.
func (c *wireComparison) value(at string, old, cur protoreflect.FieldDescriptor) {
	if wireGroup(old.Kind()) != wireGroup(cur.Kind()) {
		c.fail("%s: kind %s, now %s (not wire-compatible)", at, old.Kind(), cur.Kind())
		return
	}
	switch old.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if o, n := old.Message().FullName(), cur.Message().FullName(); o != n {
			c.fail("%s: message %s, now %s", at, o, n)
		}
	case protoreflect.EnumKind:
		if o, n := old.Enum().FullName(), cur.Enum().FullName(); o != n {
			c.fail("%s: enum %s, now %s", at, o, n)
		}
	}
}

func cardinality(f protoreflect.FieldDescriptor) string {
	if f.IsList() {
		return "repeated"
	}
	return "singular"
}

// realOneof is the oneof f is in, nil for none: proto3 optional's
// synthetic oneof only tracks presence, which is not on the wire, so it
// counts as none.
func realOneof(f protoreflect.FieldDescriptor) protoreflect.OneofDescriptor {
	if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
		return o
	}
	return nil
}

func (c *wireComparison) enum(old protoreflect.EnumDescriptor) {
	d, err := c.cur.FindDescriptorByName(old.FullName())
	cur, ok := d.(protoreflect.EnumDescriptor)
	if err != nil || !ok {
		c.fail("enum %s: gone", old.FullName())
		return
	}
	for i := range old.Values().Len() {
		v := old.Values().Get(i)
		if cur.Values().ByNumber(v.Number()) == nil && !cur.ReservedRanges().Has(v.Number()) {
			c.fail("enum %s value %d (%s): removed and its number not reserved", old.FullName(), v.Number(), v.Name())
		}
	}
	for i := range cur.Values().Len() {
		if v := cur.Values().Get(i); old.ReservedRanges().Has(v.Number()) {
			c.fail("enum %s value %d: reserved in the release, now used by %s", old.FullName(), v.Number(), v.Name())
		}
	}
}

func (c *wireComparison) service(old protoreflect.ServiceDescriptor) {
	d, err := c.cur.FindDescriptorByName(old.FullName())
	cur, ok := d.(protoreflect.ServiceDescriptor)
	if err != nil || !ok {
		c.fail("service %s: gone", old.FullName())
		return
	}
	for i := range old.Methods().Len() {
		om := old.Methods().Get(i)
		at := fmt.Sprintf("service %s method %s", old.FullName(), om.Name())
		nm := cur.Methods().ByName(om.Name())
		if nm == nil {
			c.fail("%s: gone (a peer of the release calls it)", at)
			continue
		}
		if o, n := om.Input().FullName(), nm.Input().FullName(); o != n {
			c.fail("%s: request %s, now %s", at, o, n)
		}
		if o, n := om.Output().FullName(), nm.Output().FullName(); o != n {
			c.fail("%s: response %s, now %s", at, o, n)
		}
		if om.IsStreamingClient() != nm.IsStreamingClient() || om.IsStreamingServer() != nm.IsStreamingServer() {
			c.fail("%s: %s, now %s", at, streaming(om), streaming(nm))
		}
	}
}

func streaming(m protoreflect.MethodDescriptor) string {
	return fmt.Sprintf("client streaming %v, server streaming %v", m.IsStreamingClient(), m.IsStreamingServer())
}
