package access

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/internal/textcut"
)

// The replicated state of access control, in the domain keys.
const (
	CertPrefix  = "acl/cert/"
	TokenPrefix = "acl/token/"
	// BootKey records that the bootstrap token was made (BootRecord).
	BootKey = "acl/bootstrap"
	// RevokedPrefix marks a client revoked (Revocation): no leader's
	// InitialGrants binds it again until AclGrant does. A master of 0.1.0
	// does not know it (see docs/security.md).
	RevokedPrefix = "acl/revoked/"
	// TokenUsePrefix holds when a token was last used (TokenUse), apart
	// from the token so that recording a use never rewrites it (nor
	// brings a deleted one back).
	TokenUsePrefix = "acl/tokenuse/"
)

// Where a binding came from (AclBinding.source).
const (
	SourceGrant         = "grant"
	SourceInitialGrants = "initial-grants"
	// InitialGrantMark ends the created_by of a binding a leader made from
	// its InitialGrants, as 0.1.0 already wrote it.
	InitialGrantMark = " (initial grant)"
)

// Revocation is the value of a revoked client's key.
type Revocation struct {
	AtMs int64  `json:"at_ms"`
	By   string `json:"by"`
}

// TokenUse is the value of a token's last-use key.
type TokenUse struct {
	AtMs int64 `json:"at_ms"`
}

// TokenUseGrain is how often at most a token's last use is written: a
// token used on every call costs one small Raft write a minute, not one a
// call.
const TokenUseGrain = time.Minute

// Entry is the value of a binding or a token.
type Entry struct {
	Permission string `json:"permission"`
	Name       string `json:"name,omitempty"` // a token's
	Hash       string `json:"hash,omitempty"` // a token's secret's SHA-256
	CreatedMs  int64  `json:"created_ms"`
	CreatedBy  string `json:"created_by"`
	// ExpiresMs is when a token stops being accepted; 0 (and every token
	// of 0.1.0) never.
	ExpiresMs int64 `json:"expires_ms,omitempty"`
}

// BootRecord is the value of BootKey.
type BootRecord struct {
	AtMs     int64  `json:"at_ms"`
	By       string `json:"by"`
	Accessor string `json:"accessor"`
	// Announced: the secret was told. Until it is, only the master that
	// made the token knows it; another leader finding it unannounced
	// replaces it (the secret would otherwise be lost with a write that
	// committed after its writer gave up on it).
	Announced bool `json:"announced"`
}

// MustJSON is v's JSON: the records above, which always encode.
func MustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("access: marshal %T: %v", v, err))
	}
	return b
}

// The audit trail's key spaces, in the domain keys: served calls under
// AuditPrefix, refusals apart under RefusedPrefix (AuditRecord.refused),
// both keyed <term>-<n> (AuditSuffix).
const (
	AuditPrefix   = "audit/"
	RefusedPrefix = "audit-refused/"
	// FieldMax cuts a record's args and message.
	FieldMax = 512
)

// AuditKey is the key of the n-th record the leader of term numbered.
func AuditKey(term, n uint64) string { return AuditPrefix + AuditSuffix(term, n) }

// AuditSuffix orders records by the term and count in both spaces.
func AuditSuffix(term, n uint64) string { return fmt.Sprintf("%020d-%010d", term, n) }

// AuditKeyOf is the key of a record already numbered (Id "term-n").
func AuditKeyOf(id string) (string, bool) {
	ts, ns, ok := strings.Cut(id, "-")
	if !ok {
		return "", false
	}
	term, err1 := strconv.ParseUint(ts, 10, 64)
	n, err2 := strconv.ParseUint(ns, 10, 64)
	// Only the form Id is written in: no sign, no leading zero.
	if err1 != nil || err2 != nil || strconv.FormatUint(term, 10) != ts || strconv.FormatUint(n, 10) != ns {
		return "", false
	}
	return AuditKey(term, n), true
}

// AuditPending is the code of a record whose call was still being served
// when it was written: its outcome is written over it once known, unless
// the master failed first.
const AuditPending = "PENDING"

// refusalCodes are the answers that make a record a refusal.
var refusalCodes = map[codes.Code]bool{codes.PermissionDenied: true, codes.Unauthenticated: true, codes.ResourceExhausted: true}

// IsRefusal says an answer of code c makes a record a refusal.
func IsRefusal(c codes.Code) bool { return refusalCodes[c] }

// Cut shortens s to at most max bytes, on a rune boundary.
func Cut(s string, max int) string { return textcut.Ellipsis(s, max) }
