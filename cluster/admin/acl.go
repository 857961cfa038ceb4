package admin

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/internal/clock"
	"github.com/baton-dev/baton/security"
)

// Access configures a Server's access control and audit trail.
type Access struct {
	// Enforce makes every client call need its method's permission
	// (MethodPermission), held by the client's certificate identity
	// (AclGrant) or a bearer token (AclCreateToken). Off, every caller may
	// call everything; calls are audited all the same.
	Enforce bool
	// InitialGrants are client names (baton://client/<name>) bound to a
	// permission whenever this master leads and finds them unbound: the
	// way in for automation (a Prometheus that scrapes, an operator's
	// certificate), and back in for an operator who lost the bootstrap
	// token. This master honours them from its start; a revoked one comes
	// back while it is listed here; a binding changed by AclGrant is left
	// as it is.
	InitialGrants map[string]security.Permission
	// BootstrapTokenTTL, if not 0, is how long the bootstrap token is
	// accepted after it is made (agent --acl-bootstrap-token-ttl). Default
	// 0: until deleted.
	BootstrapTokenTTL time.Duration
	// BootstrapToken, if set, is the bootstrap token (agent
	// --acl-bootstrap-token-file, in the form 'baton acl token create'
	// prints): the first leader stores it instead of making one, and
	// nobody is told its secret (OnBootstrap is not called; the log
	// names its accessor only), since the operator who gave it has it.
	// Give every master the same. It must be as strong as a made one
	// (security.CheckGivenToken).
	BootstrapToken string
	// OnBootstrap is told the bootstrap token, an admin token made by the
	// first leader of a cluster that enforces access control, once it is
	// committed: the only time its secret is seen. Default: logged at
	// WARN.
	OnBootstrap func(token string)
	// AuditRetention drops audit records older than this. Default 30
	// days.
	AuditRetention time.Duration
	// AuditMaxRecords is the ceiling of the served calls' records (a
	// tenth of it, of the refusals'): past it, the oldest record of the
	// principal holding the most goes. Default 100,000.
	AuditMaxRecords int
	// AuditMaxPerPrincipal bounds the served calls' records each
	// principal keeps: past it, that principal's oldest goes, never
	// another's. Default 10,000.
	AuditMaxPerPrincipal int
	// AuditMaxRefusedPerCaller bounds the refusals kept for each
	// principal, and for each source address: past it, the oldest
	// refusal of that principal (or address) goes. Default 1,000.
	AuditMaxRefusedPerCaller int
	// AuditFile, if set, is where this master exports every audit record
	// it commits, one JSON line each (AuditExport).
	AuditFile *AuditExport
	// ChangeLimit bounds how fast each caller may make the calls the
	// audit trail records (Audited) and be refused (change_limit.go);
	// its zero value limits nothing. The agent's default is
	// DefaultChangeRate and DefaultChangeBurst.
	ChangeLimit RateLimit
	// Metrics, if set, receives baton_acl_denied_total and the audit
	// trail's metrics.
	Metrics prometheus.Registerer
	// Clock stamps records and grants. Default real.
	Clock clock.Clock
	// ClientAuth is how clients are authenticated (the agent's
	// --client-auth): by certificate (the default), by token, or by
	// either. The masters always know each other, and region servers, by
	// certificate. Token or either needs Enforce: without it a caller
	// with no certificate would be no one at all, and may call anything.
	ClientAuth security.ClientAuth
}

// Defaults of Access.
const (
	DefaultAuditRetention  = 30 * 24 * time.Hour
	DefaultAuditMaxRecords = 100_000
	// DefaultAuditMaxPerPrincipal and DefaultAuditMaxRefusedPerCaller
	// are the per-principal quotas of the trail.
	DefaultAuditMaxPerPrincipal     = 10_000
	DefaultAuditMaxRefusedPerCaller = 1_000
	// maxAuditRecords bounds AuditMaxRecords: a record is up to ~2 KiB,
	// and every one is in every snapshot.
	maxAuditRecords = 10_000_000
)

// Validate reports a bad setting.
func (a Access) Validate() error {
	if a.AuditRetention < 0 {
		return fmt.Errorf("admin: negative audit retention %v", a.AuditRetention)
	}
	if a.BootstrapTokenTTL < 0 {
		return fmt.Errorf("admin: negative bootstrap token TTL %v", a.BootstrapTokenTTL)
	}
	if a.BootstrapToken != "" {
		if _, _, err := security.CheckGivenToken(a.BootstrapToken); err != nil {
			return fmt.Errorf("admin: the given bootstrap token: %w", err)
		}
	}
	if err := a.ChangeLimit.Validate(); err != nil {
		return fmt.Errorf("admin: change limit: %w", err)
	}
	if a.AuditMaxRecords < 0 || a.AuditMaxRecords > maxAuditRecords {
		return fmt.Errorf("admin: audit max records %d: want 1 to %d (0: the default %d)", a.AuditMaxRecords, maxAuditRecords, DefaultAuditMaxRecords)
	}
	if a.AuditMaxPerPrincipal < 0 || a.AuditMaxPerPrincipal > maxAuditRecords {
		return fmt.Errorf("admin: audit max records per principal %d: want 1 to %d (0: the default %d)", a.AuditMaxPerPrincipal, maxAuditRecords, DefaultAuditMaxPerPrincipal)
	}
	if a.AuditMaxRefusedPerCaller < 0 || a.AuditMaxRefusedPerCaller > maxAuditRecords {
		return fmt.Errorf("admin: audit max refusals per caller %d: want 1 to %d (0: the default %d)", a.AuditMaxRefusedPerCaller, maxAuditRecords, DefaultAuditMaxRefusedPerCaller)
	}
	for n, p := range a.InitialGrants {
		if err := (security.Identity{Role: security.RoleClient, ID: n}).Validate(); err != nil {
			return fmt.Errorf("admin: initial grant: %w", err)
		}
		if p < security.PermRead || p > security.PermAdmin {
			return fmt.Errorf("admin: initial grant of %s: no permission", n)
		}
	}
	if _, err := security.ParseClientAuth(string(a.ClientAuth)); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	if a.ClientAuth.CertOptional() && !a.Enforce {
		return fmt.Errorf("admin: client auth %s needs access control enforced: a caller without a certificate would otherwise be anyone, and may call everything", a.ClientAuth)
	}
	return nil
}

func (a Access) withDefaults() Access {
	if a.AuditRetention == 0 {
		a.AuditRetention = DefaultAuditRetention
	}
	if a.AuditMaxRecords == 0 {
		a.AuditMaxRecords = DefaultAuditMaxRecords
	}
	if a.AuditMaxPerPrincipal == 0 {
		a.AuditMaxPerPrincipal = DefaultAuditMaxPerPrincipal
	}
	if a.AuditMaxRefusedPerCaller == 0 {
		a.AuditMaxRefusedPerCaller = DefaultAuditMaxRefusedPerCaller
	}
	if a.Clock == nil {
		a.Clock = clock.Real{}
	}
	if a.ClientAuth == "" {
		a.ClientAuth = security.ClientAuthCert
	}
	return a
}

// MasterOnlyMethods are the admin methods (short names) only masters
// call (access.MasterOnlyMethods): a gRPC server admitting callers
// without a certificate keeps them certificate-only
// (security.MasterPolicyFor).
func MasterOnlyMethods() []string { return access.MasterOnlyMethods() }
