package security

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
)

func TestTokens(t *testing.T) {
	tok, acc, hash, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	a, secret, err := ParseToken(tok)
	if err != nil || a != acc || !ValidAccessor(acc) {
		t.Fatalf("ParseToken(%q) = %q, %v; want accessor %q", tok, a, err, acc)
	}
	if strings.Contains(hash, secret) || !TokenMatches(secret, hash) || TokenMatches(secret+"x", hash) {
		t.Fatal("the hash must match its secret only, and not hold it")
	}
	tok2, acc2, _, _ := NewToken()
	if tok2 == tok || acc2 == acc {
		t.Fatal("two tokens alike")
	}
	for _, bad := range []string{"", "bt_", tok + "x", strings.ToUpper(tok), "bt_0123_" + secret, strings.Replace(tok, "_", "-", 1), "Bearer " + tok} {
		if _, _, err := ParseToken(bad); err == nil {
			t.Errorf("ParseToken(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "0123", "0123456789ABCDEF", "0123456789abcdeg", "0123456789abcdef0"} {
		if ValidAccessor(bad) {
			t.Errorf("ValidAccessor(%q)", bad)
		}
	}
}

func TestTokenOf(t *testing.T) {
	in := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	if tok, ok := TokenOf(context.Background()); ok || tok != "" {
		t.Fatal("a token without metadata")
	}
	if tok, ok := TokenOf(in("authorization", "Bearer bt_x")); !ok || tok != "bt_x" {
		t.Fatalf("TokenOf = %q, %v", tok, ok)
	}
	// Present but malformed: ok with no token, refused as unrecognized.
	for _, md := range [][]string{{"authorization", "Basic abc"}, {"authorization", "Bearer a", "authorization", "Bearer b"}} {
		if tok, ok := TokenOf(in(md...)); !ok || tok != "" {
			t.Errorf("TokenOf(%v) = %q, %v; want present and empty", md, tok, ok)
		}
	}
}

func TestPermissions(t *testing.T) {
	for _, s := range []string{"read", "operate", "admin"} {
		p, err := ParsePermission(s)
		if err != nil || p.String() != s {
			t.Errorf("ParsePermission(%q) = %v, %v", s, p, err)
		}
	}
	if _, err := ParsePermission("root"); err == nil {
		t.Error("root accepted")
	}
	if !PermAdmin.Covers(PermOperate) || PermRead.Covers(PermOperate) || PermNone.Covers(PermRead) || !PermRead.Covers(PermNone) {
		t.Error("Covers")
	}
	if PermissionOf(context.Background()) != PermAdmin || PermissionOf(WithPermission(context.Background(), PermRead)) != PermRead {
		t.Error("PermissionOf")
	}
}
