package main

import (
	"crypto/tls"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testnet"
	"github.com/baton-dev/baton/internal/testwait"
	"github.com/baton-dev/baton/security"
)

// A kubelet probes a TLS master as scheme HTTPS with no client
// certificate and no CA check: /readyz and /livez answer it, under the
// default --client-auth cert and with access control on, and every other
// path still wants a certificate.
func TestTLSAgentAnswersProbesWithoutAClientCertificate(t *testing.T) {
	pki, err := security.NewTestPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files, err := pki.Issue(security.Identity{Role: security.RoleMaster, ID: "n1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, raftAddr, httpAddr := testnet.FreeAddr(t), testnet.FreeAddr(t), testnet.FreeAddr(t)
	out, _, cancel, done := runInBackground(map[string]string{}, "agent", "--id", "n1", "--data-dir", t.TempDir(),
		"--raft-addr", raftAddr, "--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--peers", "n1="+raftAddr,
		"--tls-ca", files.CA, "--tls-cert", files.Cert, "--tls-key", files.Key)
	t.Cleanup(func() { cancel(); exitOf(t, done) })
	testwait.For(t, 30*time.Second, "the agent's banner", func() bool { return regexp.MustCompile(`try:`).MatchString(out.String()) })

	kubelet := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 5 * time.Second}
	get := func(path string) (int, string, error) {
		resp, err := kubelet.Get("https://" + httpAddr + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}
	testwait.ForNil(t, 30*time.Second, "/readyz 200 over HTTPS without a certificate", func() error {
		code, body, err := get("/readyz")
		if err != nil {
			return err
		}
		// Only the verdict, to a caller without a certificate: the
		// reasons (leader, indexes) are for certificate holders.
		if code != http.StatusOK || body != "ready\n" {
			return &probeErr{code, body}
		}
		return nil
	})
	if code, body, err := get("/livez"); err != nil || code != http.StatusOK || body != "live\n" {
		t.Errorf("/livez: %d %q %v, want 200 live", code, body, err)
	}
	// With the certificate, the reasons.
	cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	holder := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}}, Timeout: 5 * time.Second}
	resp, err := holder.Get("https://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "ready: leader") {
		t.Errorf("/readyz with a certificate: %d %q, want 200 with the reason", resp.StatusCode, body)
	}
	for _, path := range []string{"/status", "/metrics", "/ui/procedures"} {
		if code, body, err := get(path); err != nil || code != http.StatusUnauthorized || !strings.Contains(body, "needs a client certificate") {
			t.Errorf("%s without a certificate: %d %q %v, want 401 asking for one", path, code, body, err)
		}
	}
}

type probeErr struct {
	code int
	body string
}

func (e *probeErr) Error() string { return http.StatusText(e.code) + ": " + e.body }
