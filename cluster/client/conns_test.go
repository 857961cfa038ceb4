package client

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Conns dials an address once, answers UNAVAILABLE for one it cannot dial
// and CANCELED once closed, with the messages its owner gave.
func TestConns(t *testing.T) {
	p := NewConns("test: closed", "test: ")
	a, err := p.Get("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := p.Get("127.0.0.1:1"); err != nil || b != a {
		t.Fatalf("second Get = %p, %v; want the first connection %p", b, err, a)
	}
	_, err = p.Get("%zz")
	if status.Code(err) != codes.Unavailable || !strings.HasPrefix(status.Convert(err).Message(), "test: %zz: ") {
		t.Fatalf("malformed address: %v; want UNAVAILABLE starting %q", err, "test: %zz: ")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get("127.0.0.1:1"); status.Code(err) != codes.Canceled || status.Convert(err).Message() != "test: closed" {
		t.Fatalf("Get after Close: %v; want CANCELED test: closed", err)
	}
}
