package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/cluster/admin"
	"github.com/baton-dev/baton/security"
)

// tlsFileFlags name a master's TLS material.
type tlsFileFlags struct{ ca, cert, key *string }

func addTLSFileFlags(str func(name, usage string) *string) tlsFileFlags {
	return tlsFileFlags{
		ca:   str("tls-ca", "PEM file of the cluster's CA certificate: with --tls-cert and --tls-key, mutual TLS 1.3 on Raft, gRPC and HTTP ('baton tls ca create')"),
		cert: str("tls-cert", "PEM file of this master's certificate, naming baton://master/<--id> ('baton tls cert create --role master --id ID'); reread on SIGHUP and when it changes"),
		key:  str("tls-key", "PEM file of this master's private key"),
	}
}

func (f tlsFileFlags) files() security.Files {
	return security.Files{CA: *f.ca, Cert: *f.cert, Key: *f.key}
}

// rateLimitFlags bound how fast each caller may start procedures and
// change state.
type rateLimitFlags struct{ submitRate, submitBurst, changeRate, changeBurst *string }

func addRateLimitFlags(str func(name, usage string) *string) rateLimitFlags {
	return rateLimitFlags{
		submitRate:  str("submit-rate", "calls per second each caller (its certificate's identity, else its IP address) may make that start procedures through this node; over it they are refused RESOURCE_EXHAUSTED; 0: no limit (default 0)"),
		submitBurst: str("submit-burst", "such calls an idle caller may make at once (default: the rate, at least 1)"),
		changeRate:  str("change-rate", fmt.Sprintf("calls per second each caller may make that change state (every call the audit trail records) or that are refused (PERMISSION_DENIED, UNAUTHENTICATED, HTTP 401/403), on any port of this node; over it they are answered RESOURCE_EXHAUSTED (HTTP 429); 0: no limit (default %d)", admin.DefaultChangeRate)),
		changeBurst: str("change-burst", fmt.Sprintf("such calls an idle caller may make at once (default %d)", admin.DefaultChangeBurst)),
	}
}

func (f rateLimitFlags) parse(cfg *agentConfig, bad func(string, ...any)) {
	// rate and burst set *dst from a rate limit flag's value, if given;
	// burst says whether it was.
	rate := func(name, v string, dst *float64) {
		if v = strings.TrimSpace(v); v == "" {
			return
		}
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(r) || (admin.RateLimit{Rate: r}).Validate() != nil {
			bad("--%s %q: want 0 (no limit) or calls per second in [%g, %g], e.g. 50 or 0.5", name, v, admin.MinSubmitRate, admin.MaxSubmitRate)
		}
		*dst = r
	}
	burst := func(name, v string, dst *int) bool {
		n, ok := intFlag(name, v, "a number of calls", 1, int(admin.MaxSubmitRate), bad)
		if ok {
			*dst = n
		}
		return ok
	}
	rate("submit-rate", *f.submitRate, &cfg.SubmitRate)
	if burst("submit-burst", *f.submitBurst, &cfg.SubmitBurst) && cfg.SubmitRate == 0 {
		bad("--submit-burst is the burst of --submit-rate: give the rate too")
	}
	cfg.ChangeRate, cfg.ChangeBurst = admin.DefaultChangeRate, admin.DefaultChangeBurst
	rate("change-rate", *f.changeRate, &cfg.ChangeRate)
	burst("change-burst", *f.changeBurst, &cfg.ChangeBurst)
}

// accessFlags say who may call what, and how callers are known.
type accessFlags struct{ acl, clientAuth, grants, bootTTL, bootFile *string }

func addAccessFlags(str func(name, usage string) *string) accessFlags {
	return accessFlags{
		acl: str("acl", "on: every client call needs its permission (read, operate, admin), held by its certificate's name or a token ('baton acl'); off: everyone may call everything (default: on with TLS, off without)"),
		clientAuth: str("client-auth", "how clients are known: cert, a client certificate of the CA on every connection (a token on top decides); "+
			"either, a certificate or a bearer token over TLS without one (--token with --tls-ca alone); token, a token only, a client's certificate granting nothing. "+
			"Masters and region servers always present certificates. token and either need --acl on (default cert)"),
		grants: str("acl-initial-grants", "client=permission,... bound whenever this master leads and finds the client unbound, e.g. ops=admin,prometheus=read (the way in besides the bootstrap token, which the cluster's first leader prints once)"),
		bootTTL: str("acl-bootstrap-token-ttl", "the bootstrap token, which the cluster's first leader makes and prints once, expires this long after it is made, e.g. 24h; "+
			"make your own admin token or certificate binding before then (default: never; 'acl token delete' deletes it)"),
		bootFile: str("acl-bootstrap-token-file", "file holding the bootstrap token (bt_<16 hex>_<43 base64url>, as 'baton acl token create' prints one; the same file on every master): "+
			"the cluster's first leader stores it instead of making one, and nothing prints or logs it but its accessor. "+
			"Readable by its owner (and group) only; make one with printf 'bt_%s_%s' \"$(openssl rand -hex 8)\" \"$(openssl rand -base64 32 | tr '+/' '-_' | tr -d '=')\""),
	}
}

// readBootstrapTokenFile reads and checks --acl-bootstrap-token-file. No
// message quotes the file's content: it is an admin's secret.
func readBootstrapTokenFile(path string) (string, error) {
	fi, err := os.Stat(path) // a Kubernetes Secret's file is a symlink: its target counts
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	// Group read is allowed: a Kubernetes Secret volume with an fsGroup
	// makes its files group-readable whatever the defaultMode.
	if perm := fi.Mode().Perm(); perm&0o027 != 0 {
		return "", fmt.Errorf("%s has mode %04o: an admin's secret must not be readable by others nor writable by its group (chmod 600, or a Secret volume's defaultMode 0400 or 0440)", path, perm)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if _, _, err := security.CheckGivenToken(tok); err != nil {
		return "", err
	}
	return tok, nil
}

// parse reads the access flags; cfg.TLS must be set.
func (f accessFlags) parse(cfg *agentConfig, bad func(string, ...any)) {
	cfg.ACL = cfg.TLS.Enabled()
	switch v := strings.TrimSpace(*f.acl); v {
	case "":
	case "on":
		cfg.ACL = true
	case "off":
		cfg.ACL = false
	default:
		bad("--acl %q: want on or off", v)
	}
	f.parseClientAuth(cfg, bad)
	if cfg.ACL && !cfg.TLS.Enabled() {
		bad("--acl on needs TLS (--tls-ca, --tls-cert, --tls-key): without certificates the masters cannot tell one another from clients, and would refuse each other's registrations and forwarded calls")
	}
	if v := strings.TrimSpace(*f.grants); v != "" {
		cfg.ACLInitialGrants = map[string]security.Permission{}
		for _, g := range strings.Split(v, ",") {
			name, perm, ok := strings.Cut(strings.TrimSpace(g), "=")
			p, perr := security.ParsePermission(perm)
			if !ok || perr != nil || (security.Identity{Role: security.RoleClient, ID: name}).Validate() != nil {
				bad("--acl-initial-grants: %q: want client=permission, the client's certificate name and read, operate or admin", strings.TrimSpace(g))
				continue
			}
			cfg.ACLInitialGrants[name] = p
		}
	}
	if v := strings.TrimSpace(*f.bootTTL); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			bad("--acl-bootstrap-token-ttl %q: want a duration of at least 1m, e.g. 24h", v)
		}
		cfg.ACLBootstrapTokenTTL = d
	}
	if path := strings.TrimSpace(*f.bootFile); path != "" {
		tok, err := readBootstrapTokenFile(path)
		switch {
		case err != nil:
			bad("--acl-bootstrap-token-file: %v", err)
		case !cfg.ACL:
			bad("--acl-bootstrap-token-file needs --acl on: without access control there is no bootstrap token")
		}
		cfg.ACLBootstrapToken = tok
	}
}

func (f accessFlags) parseClientAuth(cfg *agentConfig, bad func(string, ...any)) {
	// The default stays cert: either lets connections without a
	// certificate through the TLS handshake (refused above it unless they
	// carry a token), which a deployment that relies on the handshake to
	// keep strangers out, or runs --acl off, did not ask for.
	if v := strings.TrimSpace(*f.clientAuth); v != "" {
		ca, err := security.ParseClientAuth(v)
		if err != nil {
			bad("--client-auth %q: want cert, token or either", v)
		}
		cfg.ClientAuth = ca
	}
	if cfg.ClientAuth.CertOptional() {
		switch {
		case !cfg.TLS.Enabled():
			bad("--client-auth %s needs TLS (--tls-ca, --tls-cert, --tls-key): a token is a secret, sent only over TLS, and the masters still know each other by certificate", cfg.ClientAuth)
		case !cfg.ACL:
			bad("--client-auth %s needs --acl on: without access control a caller with no certificate would be anyone, and could call everything", cfg.ClientAuth)
		}
	}
}

// auditFlags bound the audit trail and name its export file.
type auditFlags struct {
	retention, maxRecords, perPrincipal, refusedPerCaller, file, fileMax, fileKeep *string
}

func addAuditFlags(str func(name, usage string) *string) auditFlags {
	return auditFlags{
		retention:        str("audit-retention", "drop audit records older than this, e.g. 720h (default 720h)"),
		maxRecords:       str("audit-max-records", fmt.Sprintf("keep at most this many audit records, dropping the oldest (default %d)", admin.DefaultAuditMaxRecords)),
		perPrincipal:     str("audit-max-per-principal", fmt.Sprintf("keep at most this many records of served calls per principal, dropping that principal's oldest (default %d)", admin.DefaultAuditMaxPerPrincipal)),
		refusedPerCaller: str("audit-max-refused-per-caller", fmt.Sprintf("keep at most this many refusals per principal and per source address, dropping that caller's oldest (default %d)", admin.DefaultAuditMaxRefusedPerCaller)),
		file:             str("audit-file", "append every audit record this master commits to this file, one JSON line each (its own evidence copy, outliving the trail's pruning); empty: none"),
		fileMax:          str("audit-file-max-size", fmt.Sprintf("rotate --audit-file past this many MiB (default %d)", admin.DefaultAuditFileMaxBytes>>20)),
		fileKeep:         str("audit-file-keep", fmt.Sprintf("rotated audit files kept (FILE.1 the newest) (default %d)", admin.DefaultAuditFileKeep)),
	}
}

func (f auditFlags) parse(cfg *agentConfig, bad func(string, ...any)) {
	if v := strings.TrimSpace(*f.retention); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute {
			bad("--audit-retention %q: want a duration of at least 1m, e.g. 720h", v)
		}
		cfg.AuditRetention = d
	}
	if v := strings.TrimSpace(*f.maxRecords); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || (admin.Access{AuditMaxRecords: n}).Validate() != nil {
			bad("--audit-max-records %q: want a number of records in 1..10000000", v)
		}
		cfg.AuditMaxRecords = n
	}
	count := func(name, v string, max int) int {
		n, _ := intFlag(name, v, "a number", 1, max, bad)
		return n
	}
	cfg.AuditMaxPerPrincipal = count("audit-max-per-principal", *f.perPrincipal, 10_000_000)
	cfg.AuditMaxRefusedPerCaller = count("audit-max-refused-per-caller", *f.refusedPerCaller, 10_000_000)
	if p := strings.TrimSpace(*f.file); p != "" {
		cfg.AuditFile = &admin.AuditExport{Path: p, MaxBytes: int64(count("audit-file-max-size", *f.fileMax, 1<<20)) << 20, Keep: count("audit-file-keep", *f.fileKeep, 1000)}
	} else if strings.TrimSpace(*f.fileMax) != "" || strings.TrimSpace(*f.fileKeep) != "" {
		bad("--audit-file-max-size and --audit-file-keep rotate --audit-file: give it too")
	}
}
