package security

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHostCheckAdmitsOnlyTheNodesNames(t *testing.T) {
	h, err := NewHostCheck(nil, "0.0.0.0:7072", "Master1:7070", "ops.example.com.", ":7071")
	if err != nil {
		t.Fatal(err)
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	for host, want := range map[string]int{
		"":                       http.StatusTeapot, // HTTP/1.0: no browser sends none
		"127.0.0.1:7072":         http.StatusTeapot,
		"[::1]:7072":             http.StatusTeapot,
		"10.1.2.3":               http.StatusTeapot,
		"localhost:7072":         http.StatusTeapot,
		"LOCALHOST.":             http.StatusTeapot,
		"master1:7072":           http.StatusTeapot,
		"OPS.example.com":        http.StatusTeapot,
		"evil.example":           http.StatusForbidden,
		"master1.evil.example":   http.StatusForbidden,
		"localhost.evil.example": http.StatusForbidden,
	} {
		r := httptest.NewRequest("GET", "/debug/domain", nil)
		r.Host = host
		w := httptest.NewRecorder()
		h.Wrap(next, "--http-allowed-hosts").ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("Host %q: %d, want %d", host, w.Code, want)
		}
		if want == http.StatusForbidden && !strings.Contains(w.Body.String(), "--http-allowed-hosts") {
			t.Errorf("Host %q: the refusal does not say how to add a name: %s", host, w.Body.String())
		}
	}
	if _, err := NewHostCheck(nil, "http://x/"); err == nil {
		t.Error("NewHostCheck took a URL for a host name")
	}
}
