package security

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/testnet"
)

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST.": true, "127.0.0.1": true, "127.9.8.7": true, "::1": true, "[::1]": true,
		"10.0.0.1": false, "0.0.0.0": false, "example.com": false, "localhost.example.com": false, "": false, "::": false,
	} {
		if got := LoopbackHost(host); got != want {
			t.Errorf("LoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestTokenNotSentOverPlaintext: a client given a token over a plaintext
// connection to an address that is not loopback (a leader hint may send it
// there) fails the call without sending the token.
func TestTokenNotSentOverPlaintext(t *testing.T) {
	sawToken := make(chan string, 10)
	addr := serveHealth(t, testnet.NonLoopbackIPv4(t).String(), grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if tok, ok := TokenOf(ctx); ok {
			sawToken <- tok
		}
		return h(ctx, req)
	}))

	token := "bt_0123456789abcdef_" + strings.Repeat("A", 43)
	call := func(addr string) error {
		return healthCheck(t, addr, grpc.WithTransportCredentials(insecure.NewCredentials()), TokenDialOption(token))
	}
	err := call(addr)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "refusing to send a bearer token over plaintext") {
		t.Fatalf("call to %s: %v, want UNAUTHENTICATED refusing to send the token", addr, err)
	}
	select {
	case tok := <-sawToken:
		t.Fatalf("the server received the token %q", tok)
	default:
	}
}
