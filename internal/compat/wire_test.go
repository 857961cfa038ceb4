package compat_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/baton-dev/baton/proto/adminpb"
	_ "github.com/baton-dev/baton/proto/optionspb"
	"github.com/baton-dev/baton/proto/raftpb"
	"github.com/baton-dev/baton/proto/rspb"
)

// wirePackages are the packages whose schemas cross the network: the admin
// API, the Master service and region-server protocol, and the Raft
// commands (also the snapshot stream and the local WAL's images).
var wirePackages = []protoreflect.FullName{"baton.admin.v1", "baton.rs.v1", "baton.raftfsm.v1"}

// loadWire reads a release's wire.binpb (wire.sh) into a registry of its
// own, apart from the current code's.
func loadWire(t *testing.T, version string) *protoregistry.Files {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", version, "wire.binpb"))
	if err != nil {
		t.Fatalf("%s: %v (make it with internal/compat/wire.sh COMMIT %s)", version, err, version)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		t.Fatalf("%s: wire.binpb: %v", version, err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		t.Fatalf("%s: wire.binpb: %v", version, err)
	}
	// A truncated or misdirected golden would compare nothing and pass.
	for _, pkg := range wirePackages {
		if files.NumFilesByPackage(pkg) == 0 {
			t.Fatalf("%s: wire.binpb holds no file of package %s", version, pkg)
		}
	}
	return files
}

// TestGoldenWire: the current code's schemas keep every released one by
// protobuf's rules (compareWire), so a current peer and one of the
// release parse each other's admin calls, region-server calls and Raft
// commands. A failure names the release, and the message and field
// number, enum and value, or service and method it breaks.
func TestGoldenWire(t *testing.T) {
	for _, version := range releases {
		t.Run(version, func(t *testing.T) {
			for _, p := range compareWire(loadWire(t, version), protoregistry.GlobalFiles) {
				t.Errorf("%s: %s", version, p)
			}
		})
	}
}

// currentWireFiles copies the current code's wire files and their
// imports, as descriptor protos a test may change.
func currentWireFiles(t *testing.T) []*descriptorpb.FileDescriptorProto {
	t.Helper()
	var out []*descriptorpb.FileDescriptorProto
	seen := map[string]bool{}
	var add func(f protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		for i := range f.Imports().Len() {
			add(f.Imports().Get(i).FileDescriptor)
		}
		out = append(out, protodesc.ToFileDescriptorProto(f))
	}
	for _, f := range []protoreflect.FileDescriptor{adminpb.File_admin_proto, rspb.File_regionserver_proto, raftpb.File_raftfsm_proto} {
		add(f)
	}
	return out
}

func buildFiles(t *testing.T, fds ...*descriptorpb.FileDescriptorProto) *protoregistry.Files {
	t.Helper()
	files, err := protodesc.NewFiles(&descriptorpb.FileDescriptorSet{File: fds})
	if err != nil {
		t.Fatalf("building descriptors: %v", err)
	}
	return files
}

// TestGoldenWireCatchesChangeToCurrent: the golden test fails on a change
// to the current schemas that breaks 0.1.0, made to a copy of them: the
// registration's field 4 turned from uint64 to string, and the region
// server's ExecuteBatch made a stream.
func TestGoldenWireCatchesChangeToCurrent(t *testing.T) {
	release := loadWire(t, "v0.1.0")
	fds := currentWireFiles(t)
	before := compareWire(release, buildFiles(t, fds...))

	for _, fd := range fds {
		if fd.GetPackage() != "baton.rs.v1" {
			continue
		}
		for _, m := range fd.GetMessageType() {
			if m.GetName() != "RegisterServerRequest" {
				continue
			}
			for _, f := range m.GetField() {
				if f.GetNumber() == 4 {
					f.Type = descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
				}
			}
		}
		for _, s := range fd.GetService() {
			for _, m := range s.GetMethod() {
				if s.GetName() == "RegionServer" && m.GetName() == "ExecuteBatch" {
					m.ServerStreaming = proto.Bool(true)
				}
			}
		}
	}
	after := compareWire(release, buildFiles(t, fds...))

	var added []string
	for _, p := range after {
		if !slices.Contains(before, p) {
			added = append(added, p)
		}
	}
	want := []string{
		"message baton.rs.v1.RegisterServerRequest field 4 (dropped_start_code): kind uint64, now string",
		"service baton.rs.v1.RegionServer method ExecuteBatch: client streaming false, server streaming false, now client streaming false, server streaming true",
	}
	for _, w := range want {
		if !slices.ContainsFunc(added, func(p string) bool { return strings.HasPrefix(p, w) }) {
			t.Errorf("the change is not caught: want %q among %q", w, added)
		}
	}
	if len(added) != len(want) {
		t.Errorf("the change gave %d problems, want %d: %q", len(added), len(want), added)
	}
}
