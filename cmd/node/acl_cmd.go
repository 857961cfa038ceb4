package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

var aclUsage = `usage: baton acl <command> [flags]

commands:
  whoami                              who the cluster takes you for, and your permission
  grant CLIENT --permission P         bind the client certificate baton://client/CLIENT
                                      to read, operate or admin (replacing what it held)
  revoke CLIENT                       remove the client certificate's binding, for good:
                                      --acl-initial-grants no longer binds it, until 'grant'
  token create NAME --permission P [--ttl D]
                                      make a bearer token, expiring after D (default never);
                                      its secret is printed this once
  token delete ACCESSOR               delete a token (ACCESSOR as 'acl list' shows it)
  list [--stale]                      list the bindings (and where each came from), the
                                      tokens (expiry, last use) and the revoked clients;
                                      never a secret

Permissions: read (lists, gets, status, the console's pages), operate (also
submit procedures, create/enable/disable tables and namespaces, move,
balance, locks), admin (also delete, abort, the repair kit, cluster
membership, maintenance, access control, the audit trail). Clients present
a certificate (--tls-cert) or a token (--token, env BATON_TOKEN). A token
goes with a client certificate where the agents run --client-auth cert (the
default), and with --tls-ca alone where they run --client-auth either or
token. Access control is on in a cluster running with TLS (agent --acl); its
first leader prints a bootstrap token with admin once. Every call but whoami
needs admin.
` + fmt.Sprintf(clientFlagsNote, "acl")

var aclAdvice = map[codes.Code]string{
	codes.InvalidArgument: invalidAdvice,
}

func init() {
	topLevel.add(topCommand{
		name: "acl", rank: 160, run: (*cli).acl,
		summary: `whoami, grant CLIENT --permission read|operate|admin, revoke CLIENT,
token create NAME --permission P, token delete ACCESSOR, list`,
	})
}

func (c *cli) acl(args []string) int {
	return c.subcommands("acl", aclUsage, args, map[string]func([]string) int{
		"whoami": c.aclWhoAmI,
		"grant":  c.aclGrant,
		"revoke": c.aclRevoke,
		"list":   c.aclList,
		"token": func(a []string) int {
			return c.subcommands("acl token", aclUsage, a, map[string]func([]string) int{
				"create": c.aclTokenCreate,
				"delete": c.aclTokenDelete,
			})
		},
	})
}

// whoamiJSON is the --json document of acl whoami.
type whoamiJSON struct {
	Principal  string `json:"principal"`
	Name       string `json:"name,omitempty"`
	Permission string `json:"permission"`
	Enforced   bool   `json:"enforced"`
}

func (c *cli) aclWhoAmI(args []string) int {
	e := c.command("acl whoami", "", aclAdvice)
	if _, code, ok := e.parse(args, 0, ""); !ok {
		return code
	}
	return e.read(func(cl *client.Client) (any, func(), error) {
		r, err := cl.WhoAmI(c.ctx)
		doc := whoamiJSON{Principal: r.GetPrincipal(), Name: r.GetName(), Permission: r.GetPermission(), Enforced: r.GetEnforced()}
		return doc, func() {
			perm := doc.Permission
			if perm == "" {
				perm = "none"
			}
			who := doc.Principal
			if doc.Name != "" {
				who += " (" + doc.Name + ")"
			}
			fmt.Fprintf(c.stdout, "%s: permission %s", who, perm)
			if !doc.Enforced {
				fmt.Fprint(c.stdout, " (access control is off on this master: everyone may call everything)")
			}
			fmt.Fprintln(c.stdout)
		}, err
	})
}

// permFlag adds --permission.
func permFlag(e *command) *string {
	return e.fs.String("permission", "", "read, operate or admin (required)")
}

func checkPermission(p string) error {
	if _, err := security.ParsePermission(p); err != nil {
		return usagef("--permission %q: want read, operate or admin", p)
	}
	return nil
}

// bindingJSON is the JSON shape of a binding.
type bindingJSON struct {
	Client     string `json:"client"`
	Permission string `json:"permission"`
	CreatedAt  string `json:"created_at,omitempty"`
	CreatedBy  string `json:"created_by,omitempty"`
	// Source: grant or initial-grants (empty from a master of 0.1.0).
	Source string `json:"source,omitempty"`
}

func toBindingJSON(b *adminpb.AclBinding) bindingJSON {
	return bindingJSON{Client: b.GetClient(), Permission: b.GetPermission(), CreatedAt: fmtMs(b.GetCreatedUnixMs()), CreatedBy: b.GetCreatedBy(), Source: b.GetSource()}
}

// revokedJSON is the JSON shape of a revoked client.
type revokedJSON struct {
	Client    string `json:"client"`
	RevokedAt string `json:"revoked_at,omitempty"`
	RevokedBy string `json:"revoked_by,omitempty"`
}

// tokenJSON is the JSON shape of a token (its secret only when made).
type tokenJSON struct {
	Accessor   string `json:"accessor"`
	Name       string `json:"name"`
	Permission string `json:"permission"`
	CreatedAt  string `json:"created_at,omitempty"`
	CreatedBy  string `json:"created_by,omitempty"`
	// ExpiresAt is empty for a token that never expires; LastUsedAt for
	// one not used since it was made (or since masters record it).
	ExpiresAt  string `json:"expires_at,omitempty"`
	LastUsedAt string `json:"last_used_at,omitempty"`
	Secret     string `json:"secret,omitempty"`
}

func toTokenJSON(t *adminpb.AclToken) tokenJSON {
	return tokenJSON{Accessor: t.GetAccessor(), Name: t.GetName(), Permission: t.GetPermission(), CreatedAt: fmtMs(t.GetCreatedUnixMs()), CreatedBy: t.GetCreatedBy(),
		ExpiresAt: fmtMs(t.GetExpiresUnixMs()), LastUsedAt: fmtMs(t.GetLastUsedUnixMs())}
}

func fmtMs(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

func (c *cli) aclGrant(args []string) int {
	e := c.command("acl grant", "CLIENT --permission read|operate|admin", aclAdvice)
	perm := permFlag(e)
	pos, code, ok := e.parse(args, 1, "client name CLIENT")
	if !ok {
		return code
	}
	if err := checkClient(pos[0]); err != nil {
		return e.fail(err)
	}
	if err := checkPermission(*perm); err != nil {
		return e.fail(err)
	}
	return e.withClient(func(cl *client.Client) int {
		b, err := cl.AclGrant(c.ctx, pos[0], *perm)
		if err != nil {
			return e.fail(err)
		}
		if e.cf.json {
			c.printJSON(toBindingJSON(b))
		} else {
			fmt.Fprintf(c.stdout, "client %s: permission %s\n", b.GetClient(), b.GetPermission())
		}
		return exitOK
	})
}

func checkClient(name string) error {
	if err := (security.Identity{Role: security.RoleClient, ID: name}).Validate(); err != nil {
		return usagef("client %q: want the name in the client certificate's baton://client/<name> (1–128 letters, digits, '.', '_' or '-')", name)
	}
	return nil
}

// removedJSON is the --json document of a revoke or a token delete.
type removedJSON struct {
	Existed bool `json:"existed"`
}

func (c *cli) aclRevoke(args []string) int {
	e := c.command("acl revoke", "CLIENT", aclAdvice)
	pos, code, ok := e.parse(args, 1, "client name CLIENT")
	if !ok {
		return code
	}
	if err := checkClient(pos[0]); err != nil {
		return e.fail(err)
	}
	return e.withClient(func(cl *client.Client) int {
		existed, err := cl.AclRevoke(c.ctx, pos[0])
		if err != nil {
			return e.fail(err)
		}
		if e.cf.json {
			c.printJSON(removedJSON{Existed: existed})
			return exitOK
		}
		what := "removed its binding"
		if !existed {
			what = "it had no binding"
		}
		fmt.Fprintf(c.stdout, "client %s: revoked (%s); no master's --acl-initial-grants binds it again, until 'baton acl grant %s'\n", pos[0], what, pos[0])
		return exitOK
	})
}

func (c *cli) removed(e *command, err error, existed bool, what string) int {
	if err != nil {
		return e.fail(err)
	}
	if e.cf.json {
		c.printJSON(removedJSON{Existed: existed})
	} else if existed {
		fmt.Fprintf(c.stdout, "%s: removed\n", what)
	} else {
		fmt.Fprintf(c.stdout, "%s: there was nothing to remove\n", what)
	}
	return exitOK
}

func (c *cli) aclTokenCreate(args []string) int {
	e := c.command("acl token create", "NAME --permission read|operate|admin [--ttl DURATION]", aclAdvice)
	perm := permFlag(e)
	ttl := e.fs.Duration("ttl", 0, "the token expires this long after it is made, e.g. 720h; 0: never (until 'acl token delete')")
	pos, code, ok := e.parse(args, 1, "token name NAME")
	if !ok {
		return code
	}
	if err := checkClient(pos[0]); err != nil {
		return e.fail(usagef("token name %q: want 1–128 letters, digits, '.', '_' or '-'", pos[0]))
	}
	if err := checkPermission(*perm); err != nil {
		return e.fail(err)
	}
	if *ttl < 0 || (*ttl > 0 && *ttl < time.Millisecond) {
		return e.fail(usagef("--ttl %v: want a positive duration, e.g. 24h (or 0: never expires)", *ttl))
	}
	return e.withClient(func(cl *client.Client) int {
		r, err := cl.AclCreateTokenTTL(c.ctx, pos[0], *perm, *ttl)
		if err != nil {
			return e.fail(err)
		}
		if e.cf.json {
			doc := toTokenJSON(r.GetToken())
			doc.Secret = r.GetSecret()
			c.printJSON(doc)
			return exitOK
		}
		expires := "never expires"
		if at := r.GetToken().GetExpiresUnixMs(); at != 0 {
			expires = "expires " + fmtMs(at)
		}
		fmt.Fprintf(c.stdout, "token %s (accessor %s, permission %s, %s); its secret, shown this once:\n%s\n",
			r.GetToken().GetName(), r.GetToken().GetAccessor(), r.GetToken().GetPermission(), expires, r.GetSecret())
		return exitOK
	})
}

func (c *cli) aclTokenDelete(args []string) int {
	e := c.command("acl token delete", "ACCESSOR", aclAdvice)
	pos, code, ok := e.parse(args, 1, "token accessor ACCESSOR")
	if !ok {
		return code
	}
	if !security.ValidAccessor(pos[0]) {
		return e.fail(usagef("accessor %q: want the 16 hex digits 'baton acl list' shows", pos[0]))
	}
	return e.withClient(func(cl *client.Client) int {
		existed, err := cl.AclDeleteToken(c.ctx, pos[0])
		return c.removed(e, err, existed, "token "+pos[0])
	})
}

// aclListJSON is the --json document of acl list.
type aclListJSON struct {
	Enforced bool          `json:"enforced"`
	Bindings []bindingJSON `json:"bindings"`
	Tokens   []tokenJSON   `json:"tokens"`
	Revoked  []revokedJSON `json:"revoked"`
	Read     *readJSON     `json:"read,omitempty"`
}

func (c *cli) aclList(args []string) int {
	return c.staleRead("acl list", aclAdvice, args, func(cl *client.Client, rf *readFlags) (any, func(), error) {
		r, err := cl.AclList(c.ctx, rf.opts()...)
		doc := aclListJSON{Enforced: r.GetEnforced(), Bindings: []bindingJSON{}, Tokens: []tokenJSON{}, Revoked: []revokedJSON{}, Read: toReadJSON(rf.served)}
		for _, v := range r.GetRevoked() {
			doc.Revoked = append(doc.Revoked, revokedJSON{Client: v.GetClient(), RevokedAt: fmtMs(v.GetRevokedUnixMs()), RevokedBy: v.GetRevokedBy()})
		}
		for _, b := range r.GetBindings() {
			doc.Bindings = append(doc.Bindings, toBindingJSON(b))
		}
		for _, t := range r.GetTokens() {
			doc.Tokens = append(doc.Tokens, toTokenJSON(t))
		}
		return doc, func() {
			if !doc.Enforced {
				fmt.Fprintln(c.stdout, "access control is off on the master that answered (agent --acl on to enforce)")
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KIND\tCLIENT/ACCESSOR\tNAME\tPERMISSION\tSOURCE\tCREATED\tBY\tEXPIRES\tLAST USED")
			for _, b := range doc.Bindings {
				fmt.Fprintf(tw, "certificate\t%s\t-\t%s\t%s\t%s\t%s\t-\t-\n", b.Client, b.Permission, orDash(b.Source), b.CreatedAt, b.CreatedBy)
			}
			for _, t := range doc.Tokens {
				fmt.Fprintf(tw, "token\t%s\t%s\t%s\ttoken create\t%s\t%s\t%s\t%s\n", t.Accessor, t.Name, t.Permission, t.CreatedAt, t.CreatedBy,
					orDash(t.ExpiresAt), orDash(t.LastUsedAt))
			}
			for _, v := range doc.Revoked {
				fmt.Fprintf(tw, "revoked\t%s\t-\t-\trevoke\t%s\t%s\t-\t-\n", v.Client, v.RevokedAt, v.RevokedBy)
			}
			_ = tw.Flush()
			c.printServed(rf.served)
		}, err
	})
}

var auditUsage = `usage: baton audit list [--principal P] [--method M] [--limit N] [--newest] [--stale]

The audit trail: every client call to a method that changes state, refusals
included, oldest first (--newest: newest first): when, who (client/NAME, token/ACCESSOR, anonymous),
what (the method and its arguments), the answer's code and the procedures
it named. Masters keep the last --audit-max-records, at most
--audit-retention old. Needs admin.
` + fmt.Sprintf(clientFlagsNote, "audit")

func init() {
	topLevel.add(topCommand{
		name: "audit", rank: 170, run: (*cli).audit,
		summary: `list [--principal P] [--method M]: who changed what, and when`,
	})
}

func (c *cli) audit(args []string) int {
	return c.subcommands("audit", auditUsage, args, map[string]func([]string) int{
		"list": c.auditList,
	})
}

// auditJSON is the JSON shape of an audit record in `audit list --json`.
// It is not access.ExportLine, the audit file's line, on purpose: the two
// are separate contracts (a person's command output, with the time as
// RFC 3339 in "at"; a machine's append-only file, with milliseconds in
// "at_unix_ms", the commit time and the exporting master), and either may
// gain a field without the other having to.
type auditJSON struct {
	ID         string   `json:"id"`
	At         string   `json:"at"`
	Principal  string   `json:"principal"`
	Name       string   `json:"name,omitempty"`
	Method     string   `json:"method"`
	Args       string   `json:"args,omitempty"`
	ArgsDigest string   `json:"args_digest,omitempty"`
	Code       string   `json:"code"`
	Message    string   `json:"message,omitempty"`
	ProcIDs    []uint64 `json:"proc_ids,omitempty"`
	Node       string   `json:"node"`
	Peer       string   `json:"peer,omitempty"`
	Via        string   `json:"via,omitempty"`
	// Refused: the call was refused before it was served (kept apart
	// in the trail, under the refusals' quotas).
	Refused bool `json:"refused"`
}

// auditListJSON is the --json document of audit list.
type auditListJSON struct {
	Records       []auditJSON `json:"records"`
	NextPageToken string      `json:"next_page_token,omitempty"`
	Read          *readJSON   `json:"read,omitempty"`
}

func (c *cli) auditList(args []string) int {
	e := c.command("audit list", "[--principal P] [--method M] [--limit N] [--newest] [--after TOKEN] [--stale]", aclAdvice)
	newest := e.fs.Bool("newest", false, "list from the newest record back (--after then takes a token of such a listing)")
	rf := addReadFlags(e.fs)
	principal := e.fs.String("principal", "", "only the calls of this caller: client/NAME, token/ACCESSOR or anonymous")
	method := e.fs.String("method", "", "only the calls of this method, e.g. CreateTable")
	limit := e.fs.Int("limit", 100, "list at most this many records (0: all)")
	after := e.fs.String("after", "", "start after the page that ended with next_page_token TOKEN")
	if _, code, ok := e.parse(args, 0, ""); !ok {
		return code
	}
	if *limit < 0 {
		return e.fail(usagef("--limit %d: want 0 (all) or a positive number", *limit))
	}
	return e.read(func(cl *client.Client) (any, func(), error) {
		recs, next, err := cl.ListAudit(c.ctx, client.AuditFilter{Principal: *principal, Method: *method, NewestFirst: *newest}, *after, *limit, rf.opts()...)
		doc := auditListJSON{Records: []auditJSON{}, NextPageToken: next, Read: toReadJSON(rf.served)}
		for _, r := range recs {
			doc.Records = append(doc.Records, auditJSON{ID: r.GetId(), At: fmtMs(r.GetAtUnixMs()), Principal: r.GetPrincipal(), Name: r.GetName(),
				Method: r.GetMethod(), Args: r.GetArgs(), ArgsDigest: r.GetArgsDigest(), Code: r.GetCode(), Message: r.GetMessage(),
				ProcIDs: r.GetProcIds(), Node: r.GetNode(), Peer: r.GetPeer(), Via: r.GetVia(), Refused: r.GetRefused()})
		}
		return doc, func() {
			tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "AT\tWHO\tMETHOD\tCODE\tPROCS\tNODE\tARGS")
			for _, r := range doc.Records {
				ids := make([]string, len(r.ProcIDs))
				for i, id := range r.ProcIDs {
					ids[i] = fmt.Sprint(id)
				}
				procs := strings.Join(ids, ",")
				if procs == "" {
					procs = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.At, r.Principal, r.Method, r.Code, procs, r.Node, r.Args)
			}
			_ = tw.Flush()
			if next != "" {
				fmt.Fprintf(c.stdout, "more: --after %s\n", next)
			}
			c.printServed(rf.served)
		}, err
	})
}
