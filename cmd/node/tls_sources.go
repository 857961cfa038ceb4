package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/baton-dev/baton/security"
)

// The client commands read BATON_TLS_CA, BATON_TLS_CERT and BATON_TLS_KEY
// (the README has operators export them). The servers have variables of
// their own, as etcd's ETCD_* and etcdctl's ETCDCTL_*: an operator's
// exported client certificate is otherwise taken by the next agent
// started from the same shell, which then fails blaming a --tls-cert
// flag it was never given.
var (
	clientTLSEnv = tlsEnv{CA: "BATON_TLS_CA", Cert: "BATON_TLS_CERT", Key: "BATON_TLS_KEY"}
	agentTLSEnv  = tlsEnv{CA: "BATON_AGENT_TLS_CA", Cert: "BATON_AGENT_TLS_CERT", Key: "BATON_AGENT_TLS_KEY"}
	rsTLSEnv     = tlsEnv{CA: "BATON_RS_TLS_CA", Cert: "BATON_RS_TLS_CERT", Key: "BATON_RS_TLS_KEY"}
)

// tlsEnv names the environment variables of the three TLS files.
type tlsEnv struct{ CA, Cert, Key string }

func (e tlsEnv) String() string { return e.CA + ", " + e.Cert + " and " + e.Key }

// tlsSources says where each of a process's TLS file names came from
// ("--tls-cert", "env BATON_AGENT_TLS_CERT", "n5.json's \"tls-cert\""),
// so that every message about a bad one names it.
type tlsSources struct{ CA, Cert, Key string }

// tlsFlags are the flags of the three files, in the order of Files.
var tlsFlags = [3]string{"tls-ca", "tls-cert", "tls-key"}

func (s tlsSources) list() [3]string { return [3]string{s.CA, s.Cert, s.Key} }

func filesList(f security.Files) [3]string { return [3]string{f.CA, f.Cert, f.Key} }

// sourceOf says where flag name's value came from: the command line, the
// environment variable env (as rawEnv has it), else the config file
// (configPath; "" when none).
func sourceOf(fs *flag.FlagSet, name, env string, rawEnv func(string) string, configPath string) string {
	switch {
	case flagSet(fs, name):
		return "--" + name
	case rawEnv(env) != "":
		return "env " + env
	case configPath != "":
		return fmt.Sprintf("%s's %q", configPath, name)
	}
	return "--" + name
}

// serverTLSSources is sourceOf for each TLS file of a server process.
func serverTLSSources(fs *flag.FlagSet, env tlsEnv, rawEnv func(string) string, args []string, configEnv string) tlsSources {
	path, given := configArg(args)
	if !given {
		path = rawEnv(configEnv)
	}
	return tlsSources{
		CA:   sourceOf(fs, "tls-ca", env.CA, rawEnv, path),
		Cert: sourceOf(fs, "tls-cert", env.Cert, rawEnv, path),
		Key:  sourceOf(fs, "tls-key", env.Key, rawEnv, path),
	}
}

// validateTLS is security.Files.Validate saying where each file given
// came from and how to give the missing ones.
func validateTLS(f security.Files, src tlsSources, env tlsEnv) error {
	if !f.Enabled() {
		return nil
	}
	var given, missing []string
	envs := [3]string{env.CA, env.Cert, env.Key}
	for i, v := range filesList(f) {
		if v != "" {
			given = append(given, fmt.Sprintf("%s (from %s)", v, src.list()[i]))
		} else {
			missing = append(missing, fmt.Sprintf("--%s (or env %s)", tlsFlags[i], envs[i]))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("TLS needs --tls-ca, --tls-cert and --tls-key together: given %s; missing %s",
		strings.Join(given, ", "), strings.Join(missing, ", "))
}

// validateClientTLS is validateTLS for a client, which may present no
// certificate of its own (a token over server-authenticated TLS): the CA
// is needed, and a certificate and its key go together.
func validateClientTLS(f security.Files, src tlsSources, env tlsEnv) error {
	if !f.Enabled() {
		return nil
	}
	if f.CA != "" && (f.Cert == "") == (f.Key == "") {
		return nil
	}
	if f.CA == "" {
		return validateTLS(f, src, env)
	}
	if f.Cert != "" {
		return fmt.Errorf("--tls-cert %s (from %s) needs its key: give --tls-key (or env %s)", f.Cert, src.Cert, env.Key)
	}
	return fmt.Errorf("--tls-key %s (from %s) needs its certificate: give --tls-cert (or env %s)", f.Key, src.Key, env.Cert)
}

// explainTLS names, in err (a security error about f's files), where the
// file it names came from.
func explainTLS(err error, f security.Files, src tlsSources) error {
	msg := strings.TrimPrefix(err.Error(), "security: ")
	files, from := filesList(f), src.list()
	// The certificate first: the key's or the CA's name may be a
	// prefix of it.
	for _, i := range []int{1, 2, 0} {
		if files[i] != "" && strings.Contains(msg, files[i]) {
			return usagef("%s (--%s %s, from %s)", msg, tlsFlags[i], files[i], from[i])
		}
	}
	return usagef("%s (TLS files from %s, %s and %s)", msg, src.CA, src.Cert, src.Key)
}

// certRole reads the role the certificate in PEM file path names.
func certRole(path string) (security.Role, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for {
		var b *pem.Block
		b, raw = pem.Decode(raw)
		if b == nil {
			return "", errors.New("holds no PEM certificate")
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return "", err
		}
		id, err := security.IdentityOf(c)
		if err != nil {
			return "", errors.New(strings.TrimPrefix(err.Error(), "security: "))
		}
		return id.Role, nil
	}
}

// legacyServerTLS is what a server (of role, named cmd, whose own
// variables are own) takes from the client commands' BATON_TLS_*, which
// servers read before they had variables of their own: when nothing else
// gives it TLS files and BATON_TLS_CERT names a certificate of its role,
// it takes all three, warning that this is deprecated. A client's
// certificate there is the client's, left to it silently; anything else
// is left with a note saying why.
func legacyServerTLS(cmd string, role security.Role, own tlsEnv, rawEnv func(string) string, warn func(string, ...any)) (security.Files, tlsSources, bool) {
	f := security.Files{CA: rawEnv(clientTLSEnv.CA), Cert: rawEnv(clientTLSEnv.Cert), Key: rawEnv(clientTLSEnv.Key)}
	if !f.Enabled() {
		return security.Files{}, tlsSources{}, false
	}
	if f.Cert == "" {
		warn("baton %s: ignoring %s: without %s they are not a %s's TLS files (this command's are %s)", cmd, clientTLSEnv, clientTLSEnv.Cert, role, own)
		return security.Files{}, tlsSources{}, false
	}
	got, err := certRole(f.Cert)
	switch {
	case err == nil && got == security.RoleClient:
		return security.Files{}, tlsSources{}, false
	case err != nil:
		warn("baton %s: ignoring %s: %s=%s: %v (this command's variables are %s)", cmd, clientTLSEnv, clientTLSEnv.Cert, f.Cert, err, own)
		return security.Files{}, tlsSources{}, false
	case got != role:
		warn("baton %s: ignoring %s: %s=%s is a %s's certificate, not a %s's (this command's variables are %s)", cmd, clientTLSEnv, clientTLSEnv.Cert, f.Cert, got, role, own)
		return security.Files{}, tlsSources{}, false
	}
	warn("baton %s: warning: taking TLS files from %s, the client commands' variables; set %s instead (deprecated: a later release ignores them here)", cmd, clientTLSEnv, own)
	src := tlsSources{CA: "env " + clientTLSEnv.CA, Cert: "env " + clientTLSEnv.Cert, Key: "env " + clientTLSEnv.Key}
	return f, src, true
}
