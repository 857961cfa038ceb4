package access

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/baton-dev/baton/internal/reqlimit"
	"github.com/baton-dev/baton/proto/adminpb"
)

// requestMax is the largest request a record keeps whole
// (NewRequestRecord): twice what its JSON is cut at, so that what a
// reader makes of it is the JSON a record made at the call would hold.
const requestMax = 2 * FieldMax

// requestTypes is the request message of each method of the admin
// service, by the short name records give.
var requestTypes = sync.OnceValue(func() map[string]protoreflect.MessageType {
	out := map[string]protoreflect.MessageType{}
	svcs := adminpb.File_admin_proto.Services()
	for i := range svcs.Len() {
		ms := svcs.Get(i).Methods()
		for j := range ms.Len() {
			if mt, err := protoregistry.GlobalTypes.FindMessageByName(ms.Get(j).Input().FullName()); err == nil {
				out[string(ms.Get(j).Name())] = mt
			}
		}
	}
	return out
})

// isRequestOf says m is the request message of method, a method of a
// service this binary knows.
func isRequestOf(method string, m proto.Message) bool {
	mt := requestTypes()[method]
	return mt != nil && mt.Descriptor().FullName() == m.ProtoReflect().Descriptor().FullName()
}

func argsDigest(wire []byte) string {
	h := sha256.Sum256(wire)
	return hex.EncodeToString(h[:])
}

// argsJSON is m as JSON, compact, cut at FieldMax. Compact: protojson
// adds a space here and there, at random but the same way in one binary
// (to keep anyone from relying on its bytes), so without it a record
// rendered as it is read (RenderArgs) would list differently on
// masters of different builds, and be cut elsewhere.
func argsJSON(m proto.Message) string {
	b, err := (protojson.MarshalOptions{UseProtoNames: true}).Marshal(m)
	if err != nil {
		return ""
	}
	var compact bytes.Buffer
	if json.Compact(&compact, b) == nil {
		b = compact.Bytes()
	}
	return Cut(string(b), FieldMax)
}

// RenderArgs gives r, a record that keeps its call's request
// (NewRequestRecord), the args and args_digest a record made at the call
// would hold, and lets go of the request: it is a stored form only, which
// no answer carries. A request this binary cannot read (of a method it
// does not know, or not decoding as that method's) keeps its digest, and
// its args say why there are none. Records without a request are left as
// they are.
func RenderArgs(r *adminpb.AuditRecord) {
	if len(r.GetRequest()) == 0 {
		return
	}
	wire := r.Request
	r.Request = nil
	r.ArgsDigest = argsDigest(wire)
	mt := requestTypes()[r.GetMethod()]
	if mt == nil {
		r.Args = "(a request of a method this binary does not know)"
		return
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(wire, m); err != nil {
		r.Args = "(a request that does not decode)"
		return
	}
	r.Args = Cut(reqlimit.Escape(argsJSON(m)), FieldMax)
}

// UnmarshalRecord decodes a stored record (StoredRecord.Value) into r as
// its readers see it: its args rendered (RenderArgs).
func UnmarshalRecord(b []byte, r *adminpb.AuditRecord) error {
	if err := proto.Unmarshal(b, r); err != nil {
		return err
	}
	RenderArgs(r)
	return nil
}
