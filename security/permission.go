package security

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/enumname"
)

// Permission is what a client may do through the admin API and the
// console. Each covers the ones before it: read < operate < admin. The
// zero value is no permission at all.
type Permission int

// The permissions, weakest first.
const (
	PermNone Permission = iota
	// PermRead: lists, gets, status, the console's pages.
	PermRead
	// PermOperate: submit procedures, create, enable and disable tables,
	// namespaces, move and balance, locks.
	PermOperate
	// PermAdmin: delete, abort, the repair kit, cluster membership,
	// maintenance, access control and the audit trail.
	PermAdmin
)

var permissionNames = []string{PermRead: "read", PermOperate: "operate", PermAdmin: "admin"}

// String is "read", "operate" or "admin"; "" for PermNone.
func (p Permission) String() string {
	name, _ := enumname.Lookup(p, permissionNames)
	return name
}

// Covers says a holder of p may do what needs want.
func (p Permission) Covers(want Permission) bool { return p >= want }

// ParsePermission reads "read", "operate" or "admin".
func ParsePermission(s string) (Permission, error) {
	switch s {
	case "read":
		return PermRead, nil
	case "operate":
		return PermOperate, nil
	case "admin":
		return PermAdmin, nil
	}
	return PermNone, fmt.Errorf("security: permission %q: want read, operate or admin", s)
}

// A bearer token is "bt_<accessor>_<secret>": the accessor (16 hex
// digits) names it in listings, audit records and deletes, and is no
// secret; the secret is 32 random bytes. The masters keep only the
// secret's SHA-256: with 256 random bits a plain hash is as strong as a
// slow one, and checking it costs a call nothing.
const tokenPrefix = "bt_"

var tokenPattern = regexp.MustCompile(`^bt_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$`)

// NewToken makes a bearer token: the whole token to hand out once, its
// accessor, and the hash to keep.
func NewToken() (token, accessor, hash string, err error) {
	var a [8]byte
	var s [32]byte
	if _, err := rand.Read(a[:]); err != nil {
		return "", "", "", fmt.Errorf("security: token: %w", err)
	}
	if _, err := rand.Read(s[:]); err != nil {
		return "", "", "", fmt.Errorf("security: token: %w", err)
	}
	accessor = hex.EncodeToString(a[:])
	secret := base64.RawURLEncoding.EncodeToString(s[:])
	return tokenPrefix + accessor + "_" + secret, accessor, HashTokenSecret(secret), nil
}

// minGivenSecretChars is the fewest distinct characters a given token's
// secret may hold. A generated one (32 random bytes, 43 base64url
// characters) holds about 30; fewer than 16 happens with a probability
// below 1e-12, so a secret under it was made by hand ("aaaa...", a
// repeated word) and is refused.
const minGivenSecretChars = 16

// CheckGivenToken checks a token an operator made instead of Baton (agent
// --acl-bootstrap-token-file): the form of a generated one, and a secret
// as varied as a random one. It returns the accessor and the hash to keep.
// Its errors never quote the token.
func CheckGivenToken(token string) (accessor, hash string, err error) {
	acc, secret, err := ParseToken(token)
	if err != nil {
		return "", "", err
	}
	seen := map[rune]bool{}
	for _, r := range secret {
		seen[r] = true
	}
	if len(seen) < minGivenSecretChars {
		return "", "", fmt.Errorf("security: the token's secret has %d distinct characters, want at least %d: it is not random; make one with "+
			"printf 'bt_%%s_%%s' \"$(openssl rand -hex 8)\" \"$(openssl rand -base64 32 | tr '+/' '-_' | tr -d '=')\"", len(seen), minGivenSecretChars)
	}
	return acc, HashTokenSecret(secret), nil
}

// ParseToken splits a token into its accessor and secret.
func ParseToken(token string) (accessor, secret string, err error) {
	m := tokenPattern.FindStringSubmatch(token)
	if m == nil {
		return "", "", fmt.Errorf("security: not a baton token (want bt_<16 hex digits>_<43 base64url characters>)")
	}
	return m[1], m[2], nil
}

// HashTokenSecret is what the masters keep of a token's secret.
func HashTokenSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// TokenMatches says secret is the one hash was made of, in constant time.
func TokenMatches(secret, hash string) bool {
	got := HashTokenSecret(secret)
	return subtle.ConstantTimeCompare([]byte(got), []byte(hash)) == 1
}

// ValidAccessor says s is a token accessor's form.
func ValidAccessor(s string) bool {
	if len(s) != 16 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// authorizationKey is the gRPC metadata key of a bearer token.
const authorizationKey = "authorization"

// tokenCreds sends a bearer token on every call.
type tokenCreds struct{ token string }

// GetRequestMetadata refuses to put the token on a plaintext connection to
// anything but loopback: whoever is on the path would read it and could
// act as its holder. The CLI refuses such an --addr before it dials; this
// also covers an address it was sent to by a leader hint.
func (t tokenCreds) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	if ri, ok := credentials.RequestInfoFromContext(ctx); ok && !overTLSInfo(ri.AuthInfo) {
		if host := uriHost(uri); !LoopbackHost(host) {
			return nil, status.Errorf(codes.Unauthenticated, "baton: refusing to send a bearer token over plaintext to %q, which is not a loopback address: use TLS (--tls-ca)", host)
		}
	}
	return map[string]string{authorizationKey: "Bearer " + t.token}, nil
}

// RequireTransportSecurity is false so that a token also works over a
// plaintext loopback connection (agent --dev); GetRequestMetadata refuses
// any other plaintext connection.
func (t tokenCreds) RequireTransportSecurity() bool { return false }

func overTLSInfo(ai credentials.AuthInfo) bool {
	_, ok := ai.(credentials.TLSInfo)
	return ok
}

// uriHost is the host of the first of a call's audience URIs
// ("https://host:port/service"), "" if there is none.
func uriHost(uri []string) string {
	if len(uri) == 0 {
		return ""
	}
	u, err := url.Parse(uri[0])
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// LoopbackHost says host (a name or an IP address, without a port) is this
// machine's loopback: "localhost", 127.0.0.0/8 or ::1. A name is not
// resolved: what it resolves to when dialled may differ from what it
// resolved to when checked.
func LoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

var _ credentials.PerRPCCredentials = tokenCreds{}

// TokenDialOption sends token as a bearer token on every call of a client.
func TokenDialOption(token string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(tokenCreds{token: token})
}

// TokenOf is the bearer token an incoming call carries, if any: ok with
// an empty token means the header is there but malformed.
func TokenOf(ctx context.Context) (token string, ok bool) {
	md, found := metadata.FromIncomingContext(ctx)
	if !found {
		return "", false
	}
	vals := md.Get(authorizationKey)
	if len(vals) == 0 {
		return "", false
	}
	if len(vals) > 1 {
		return "", true
	}
	t, cut := strings.CutPrefix(vals[0], "Bearer ")
	if !cut {
		return "", true
	}
	return strings.TrimSpace(t), true
}

// WithToken returns ctx carrying token as the outgoing call's bearer
// token (a master passing a client's token on with a forwarded call).
func WithToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, authorizationKey, "Bearer "+token)
}

type permissionKey struct{}

// WithPermission returns ctx saying what the caller of an HTTP request may
// do (the console hides what it may not).
func WithPermission(ctx context.Context, p Permission) context.Context {
	return context.WithValue(ctx, permissionKey{}, p)
}

// PermissionOf is what WithPermission put in ctx; without it (access
// control is not enforced) everything is permitted.
func PermissionOf(ctx context.Context) Permission {
	if p, ok := ctx.Value(permissionKey{}).(Permission); ok {
		return p
	}
	return PermAdmin
}

type refusalRecorderKey struct{}

// WithRefusalRecorder returns ctx carrying record, which records a refusal
// of the HTTP request ctx is of in the audit trail (the master's HTTP
// authorizer passes its own on): for a handler behind the authorizer that
// refuses on its own account, as the console refuses an action to a user
// without admin.
func WithRefusalRecorder(ctx context.Context, record func(code int, why string)) context.Context {
	return context.WithValue(ctx, refusalRecorderKey{}, record)
}

// RecordRefusal records, with what WithRefusalRecorder put in ctx, that
// the request was answered code for why; without it (access control is
// not enforced: no audit trail) it does nothing.
func RecordRefusal(ctx context.Context, code int, why string) {
	if record, ok := ctx.Value(refusalRecorderKey{}).(func(int, string)); ok && record != nil {
		record(code, why)
	}
}
