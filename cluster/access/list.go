package access

import (
	"encoding/json"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// ListPrefixes are AclList's lists, in the order it pages them: the
// bindings, the tokens, the revocations.
var ListPrefixes = []string{CertPrefix, TokenPrefix, RevokedPrefix}

// DecodeListEntry is the answer's message of the entry stored at key
// under prefix (one of ListPrefixes): an *adminpb.AclBinding,
// *adminpb.AclToken or *adminpb.AclRevocation; nil if it does not
// decode.
func DecodeListEntry(prefix, key string, v []byte) proto.Message {
	name := strings.TrimPrefix(key, prefix)
	if prefix == RevokedPrefix {
		var r Revocation
		if json.Unmarshal(v, &r) != nil {
			return nil
		}
		return &adminpb.AclRevocation{Client: name, RevokedUnixMs: r.AtMs, RevokedBy: r.By}
	}
	var e Entry
	if json.Unmarshal(v, &e) != nil {
		return nil
	}
	if prefix == CertPrefix {
		return e.Binding(name)
	}
	return e.Token(name)
}

// Binding is e as the binding of client, saying where it came from.
func (e Entry) Binding(client string) *adminpb.AclBinding {
	source := SourceGrant
	if strings.HasSuffix(e.CreatedBy, InitialGrantMark) {
		source = SourceInitialGrants
	}
	return &adminpb.AclBinding{Client: client, Permission: e.Permission, CreatedUnixMs: e.CreatedMs, CreatedBy: e.CreatedBy, Source: source}
}

// Token is e as the token with accessor acc (no secret, no hash).
func (e Entry) Token(acc string) *adminpb.AclToken {
	return &adminpb.AclToken{Accessor: acc, Name: e.Name, Permission: e.Permission, CreatedUnixMs: e.CreatedMs, CreatedBy: e.CreatedBy, ExpiresUnixMs: e.ExpiresMs}
}
