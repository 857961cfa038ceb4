package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/catalog"
	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/internal/reqlimit"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// Exit codes of every command.
const (
	exitOK          = 0 // done
	exitFailed      = 1 // the operation failed (procedure rolled back, NOT_FOUND, FAILED_PRECONDITION, ...)
	exitUsage       = 2 // bad usage: flags, arguments, or arguments the cluster refused as invalid
	exitUnavailable = 3 // no leader answered in time
)

// defaultAddr is the admin address used without --addr and BATON_ADDR: the
// one `baton agent --dev` listens on.
const defaultAddr = "127.0.0.1:7070"

// cli carries a command's environment, so tests can run commands in-process.
type cli struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// watching, if set, is told the id of a procedure the command has
	// submitted and now waits for: a test interrupting "a wait" needs to
	// know the submission's answer arrived, not only that the cluster has
	// the procedure.
	watching func(id uint64)
}

// usageError is a bad command line: exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// clientFlags are the flags every client subcommand takes.
type clientFlags struct {
	addr    string
	envAddr string // BATON_ADDR, to name it when its value is wrong
	json    bool
	timeout time.Duration
	// tls is the client's TLS material (--tls-ca, --tls-cert, --tls-key),
	// for a cluster that runs with TLS.
	tls security.Files
	// token is a bearer token (--token, BATON_TOKEN), for a cluster that
	// enforces access control.
	token string
	// stderr is where the client says what it waits for.
	stderr io.Writer
	// fs is the command's flag set: whether a TLS file came from its flag
	// or its variable, for messages.
	fs *flag.FlagSet
}

// newFlagSet returns a flag set for "baton <name>" with the client flags.
func (c *cli) newFlagSet(name, synopsis string) (*flag.FlagSet, *clientFlags) {
	fs := flag.NewFlagSet("baton "+name, flag.ContinueOnError)
	newUsageOut(fs, c.stdout, c.stderr)
	cf := &clientFlags{stderr: c.stderr, fs: fs}
	def := c.getenv("BATON_ADDR")
	if def == "" {
		def = defaultAddr
	}
	fs.StringVar(&cf.addr, "addr", def, "admin (gRPC) addresses of any cluster nodes, comma-separated (env BATON_ADDR)")
	cf.envAddr = c.getenv("BATON_ADDR")
	fs.BoolVar(&cf.json, "json", false, "print exactly one JSON document on stdout")
	fs.StringVar(&cf.tls.CA, "tls-ca", c.getenv("BATON_TLS_CA"), "PEM file of the cluster's CA certificate, for a cluster that runs with TLS (env BATON_TLS_CA)")
	fs.StringVar(&cf.tls.Cert, "tls-cert", c.getenv("BATON_TLS_CERT"), "PEM file of this client's certificate, naming baton://client/<name> (env BATON_TLS_CERT)")
	fs.StringVar(&cf.tls.Key, "tls-key", c.getenv("BATON_TLS_KEY"), "PEM file of this client's private key (env BATON_TLS_KEY)")
	fs.StringVar(&cf.token, "token", c.getenv("BATON_TOKEN"), "bearer token ('baton acl token create', or the bootstrap token) for a cluster enforcing access control, sent over TLS (--tls-ca), or in plaintext only to a loopback --addr; prefer the environment to the command line, which others may see (env BATON_TOKEN)")
	fs.DurationVar(&cf.timeout, "timeout", 10*time.Second, "give up when no leader has answered for this long; given explicitly, it also bounds --wait and 'proc wait' (exit 3; without it a wait lasts as long as the procedure)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: baton %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs, cf
}

// parse parses args with fs, allowing flags after positional arguments
// ("baton proc get 7 --json"), and returns the positional ones. After "--"
// everything is positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	if u, ok := fs.Output().(*usageOut); ok {
		u.help = helpAsked(args)
	}
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// parseFlags is fs.Parse(args), but for how a mistake is said. The flag
// package says a bad value in its own words ("invalid value "1e9" for flag
// -regions: parse error") and then prints the whole usage, which buries
// them: what it says is caught here and said again as one line naming the
// flag, the value and what is wanted, with the way to the help. Help
// asked for (-h) is printed as before.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	var said strings.Builder
	fs.SetOutput(&said)
	fs.Usage = func() {
		if said.Len() == 0 { // help asked for: nothing was refused
			fs.SetOutput(out)
			usage()
		}
	}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(out, "%s: %s\nrun '%s -h' for usage\n", fs.Name(), flagError(fs, err), fs.Name())
	}
	return err
}

// parseFailed is the exit code of a flag parsing error, which the flag
// package has already reported: 0 for -h, else bad usage.
func parseFailed(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitUsage
}

// flagsFailed reports a command's failed flag parse and returns its exit
// code: a usage error is said with the way to the command's help; the
// flag package has already said what it refused, or printed the help.
func (c *cli) flagsFailed(cmd string, err error) int {
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(c.stderr, "baton %s: %s\nrun 'baton %s -h' for usage\n", cmd, ue.msg, cmd)
		return exitUsage
	}
	return parseFailed(err)
}

// runFailed reports how a long-running command (agent, regionserver)
// ended: a usage error it found on starting (TLS files it cannot use) is
// said as flagsFailed says one, exit 2; any other, exit 1.
func (c *cli) runFailed(cmd string, err error) int {
	var ue *usageError
	if errors.As(err, &ue) {
		return c.flagsFailed(cmd, err)
	}
	fmt.Fprintf(c.stderr, "baton %s: %v\n", cmd, err)
	return exitFailed
}

// client builds the API client of cf.
func (cf *clientFlags) client() (*client.Client, error) {
	var addrs []string
	for _, a := range strings.Split(cf.addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, usagef("--addr is empty: give the admin address of any node, e.g. --addr %s", defaultAddr)
	}
	// A malformed address would otherwise only fail as "unavailable" once
	// --timeout ran out.
	src := "--addr"
	if cf.envAddr != "" && cf.addr == cf.envAddr {
		src = "BATON_ADDR"
	}
	for _, a := range addrs {
		if err := checkAddr(src, a, true); err != nil {
			return nil, err
		}
	}
	if cf.timeout <= 0 {
		return nil, usagef("--timeout %v must be positive", cf.timeout)
	}
	creds, err := cf.credentials()
	if err != nil {
		return nil, err
	}
	var opts []grpc.DialOption
	var copts []client.Option
	if creds != nil {
		opts = append(opts, creds.DialOption(security.RoleMaster))
		if !creds.HasCertificate() {
			copts = append(copts, client.WithCertificateCheck(func(ctx context.Context, addr string) bool {
				return creds.CertificateRequired(ctx, addr, 2*time.Second, security.RoleMaster)
			}))
		}
	}
	if cf.token != "" {
		if _, _, err := security.ParseToken(cf.token); err != nil {
			return nil, usagef("--token (or BATON_TOKEN): not a baton token: want bt_<accessor>_<secret> as 'baton acl token create' printed it")
		}
		if creds == nil {
			if err := cf.checkPlaintextToken(addrs); err != nil {
				return nil, err
			}
		}
		opts = append(opts, security.TokenDialOption(cf.token))
	}
	opts = append(opts, cf.escapeAnswers()...)
	return client.New(addrs, append(copts, client.WithCallTimeout(cf.timeout), client.WithDialOptions(opts...), client.WithRetryNotice(cf.electionNotice()))...)
}

// checkPlaintextToken refuses a bearer token bound for a master over
// plaintext anywhere but this host: anyone on the path would read it and
// could act as its holder until it is deleted.
func (cf *clientFlags) checkPlaintextToken(addrs []string) error {
	src := "--token"
	if cf.fs != nil && !flagSet(cf.fs, "token") {
		src = "BATON_TOKEN"
	}
	for _, a := range addrs {
		host, _, _ := net.SplitHostPort(a) // checked by checkAddr
		if !security.LoopbackHost(host) {
			return usagef("%s: refusing to send a bearer token in cleartext to %s, which is not a loopback address: anyone on the path could read it and act as its holder. "+
				"Give the cluster's CA with --tls-ca (env BATON_TLS_CA) to use TLS, or use the token only with --addr on this host (127.0.0.1, ::1, localhost)", src, a)
		}
	}
	return nil
}

// electionNotice returns the client's retry notice: while a master
// answers that it knows no leader, the command says on stderr that it
// waits for an election (once per address and answer), rather than being
// silent until --timeout. stdout stays the answer alone.
func (cf *clientFlags) electionNotice() func(addr string, err error) {
	var mu sync.Mutex
	said := map[string]bool{}
	return func(addr string, err error) {
		if cf.stderr == nil || !client.AwaitsLeader(err) {
			return
		}
		msg := status.Convert(err).Message()
		mu.Lock()
		defer mu.Unlock()
		if said[addr+"\x00"+msg] {
			return
		}
		said[addr+"\x00"+msg] = true
		fmt.Fprintf(cf.stderr, "(waiting for a leader: %s answers %q; giving up after --timeout %v)\n", addr, msg, cf.timeout)
	}
}

// escapeAnswers escapes the answers printed as text: an owner or holder
// holding a newline or an escape sequence is shown escaped, not acted on
// by the terminal. JSON escapes by itself.
func (cf *clientFlags) escapeAnswers() []grpc.DialOption {
	if cf.json {
		return nil
	}
	return reqlimit.EscapeAnswers()
}

// dialOptions are the TLS dial options of a connection to a server of
// role, none without --tls-*, and escapeAnswers. Unusable material is bad
// usage.
func (cf *clientFlags) dialOptions(role security.Role) ([]grpc.DialOption, error) {
	return cf.dialOptionsWith(func(c *security.Credentials) grpc.DialOption { return c.DialOption(role) })
}

// dialOptionsFor is dialOptions for a connection to exactly server want.
func (cf *clientFlags) dialOptionsFor(want security.Identity) ([]grpc.DialOption, error) {
	return cf.dialOptionsWith(func(c *security.Credentials) grpc.DialOption { return c.DialOptionFor(want) })
}

// dialOptionsWith is dialOptions with the TLS option that tls makes of
// the loaded credentials.
func (cf *clientFlags) dialOptionsWith(tls func(*security.Credentials) grpc.DialOption) ([]grpc.DialOption, error) {
	creds, err := cf.credentials()
	if err != nil {
		return nil, err
	}
	if creds == nil {
		return cf.escapeAnswers(), nil
	}
	return append([]grpc.DialOption{tls(creds)}, cf.escapeAnswers()...), nil
}

// credentials loads --tls-* (nil without them): --tls-ca alone is a
// client known by its token (security.LoadClient).
func (cf *clientFlags) credentials() (*security.Credentials, error) {
	if !cf.tls.Enabled() {
		return nil, nil
	}
	src := tlsSources{CA: "env " + clientTLSEnv.CA, Cert: "env " + clientTLSEnv.Cert, Key: "env " + clientTLSEnv.Key}
	if cf.fs != nil {
		for _, f := range []struct {
			name string
			dst  *string
		}{{"tls-ca", &src.CA}, {"tls-cert", &src.Cert}, {"tls-key", &src.Key}} {
			if flagSet(cf.fs, f.name) {
				*f.dst = "--" + f.name
			}
		}
	}
	if err := validateClientTLS(cf.tls, src, clientTLSEnv); err != nil {
		return nil, usagef("%v", err)
	}
	creds, err := security.LoadClient(cf.tls, nil, nil)
	if err != nil {
		return nil, explainTLS(err, cf.tls, src)
	}
	return creds, nil
}

// parseID reads a procedure id argument.
func parseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, usagef("procedure id %q: want a positive integer, as printed by 'baton proc submit' or 'baton proc list'", s)
	}
	return id, nil
}

// finish reports err (if any) and returns the exit code: usage errors get
// the command's synopsis, API errors their meaning and what to do.
func (c *cli) finish(cmd string, fs *flag.FlagSet, cf *clientFlags, err error) int {
	return c.finishWith(cmd, fs, cf, err, nil)
}

// finishWith is finish with advice of the command's own for some codes: the
// default advice is about procedures, not, say, a table NOT_FOUND.
func (c *cli) finishWith(cmd string, fs *flag.FlagSet, cf *clientFlags, err error, advise map[codes.Code]string) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(c.stderr, "baton %s: %s\n", cmd, ue.msg)
		if fs != nil {
			fmt.Fprintf(c.stderr, "run 'baton %s -h' for usage\n", cmd)
		}
		return exitUsage
	}
	st := status.Convert(err)
	if st.Code() == codes.Internal && strings.Contains(st.Message(), "error while marshaling") {
		// gRPC refused to encode the request here (a string that is not
		// UTF-8): bad input, which the cluster never saw.
		st = status.New(codes.InvalidArgument, "a value given is not valid UTF-8; nothing was sent ("+st.Message()+")")
	}
	code := exitFailed
	var advice string
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		code = exitUnavailable
		// The message names each address tried and how it failed.
		advice = "the cluster is unavailable: check that its agents run ('baton agent') and that --addr or BATON_ADDR names their admin addresses"
	case codes.InvalidArgument:
		code = exitUsage
		advice = "the cluster refused the request as invalid: check the procedure type and --arg values"
	case codes.NotFound:
		advice = "check the id with 'baton proc list'; finished procedures are forgotten once acknowledged or expired"
	case codes.FailedPrecondition:
		advice = "the procedure's state does not allow this: see it with 'baton proc get ID'"
	case codes.Canceled:
		advice = "interrupted"
	case codes.PermissionDenied:
		advice = "your certificate or token lacks the permission named: 'baton acl whoami' says what you hold; an admin grants more ('baton acl grant', 'baton acl token create')"
	case codes.Unauthenticated:
		advice = unauthenticatedAdvice(st.Message())
	}
	if a, ok := advise[st.Code()]; ok {
		advice = a
	}
	if st.Code() == codes.PermissionDenied && strings.Contains(st.Message(), " belongs to ") && strings.Contains(st.Message(), "--force") {
		advice = "it is another identity's (the one named): they may act on it; an admin may with --force, which the audit trail records ('baton acl whoami' says who you are)"
	}
	if st.Code() == codes.FailedPrecondition && strings.HasPrefix(st.Message(), catalog.MaintenanceRefusal) {
		advice = "an operator turned maintenance mode on ('baton cluster maintenance status'); new procedures are accepted once it is off"
	}
	msg := st.Message()
	if strings.Contains(msg, client.SpeaksTLS) {
		msg = strings.ReplaceAll(msg, client.SpeaksTLS, "this port speaks TLS: give --tls-ca, --tls-cert, --tls-key (env BATON_TLS_CA, BATON_TLS_CERT, BATON_TLS_KEY)")
		advice = "the cluster runs with TLS: this command needs the cluster's CA and a client certificate ('baton tls cert create --role client')"
	}
	// The code, as the README promises, so that a script (or a person
	// searching the docs) need not parse the sentence.
	if st.Code() != codes.Unknown {
		fmt.Fprintf(c.stderr, "baton %s: %s (%s)\n", cmd, msg, adminpb.CodeName(st.Code()))
	} else {
		fmt.Fprintf(c.stderr, "baton %s: %s\n", cmd, msg)
	}
	if advice != "" {
		fmt.Fprintf(c.stderr, "  %s\n", advice)
	}
	if cf != nil && cf.json {
		c.printJSON(map[string]any{"error": map[string]any{"code": adminpb.CodeName(st.Code()), "message": msg, "exit_code": code}})
	}
	return code
}

func (c *cli) printJSON(v any) {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// procJSON is the JSON shape of a procedure.
type procJSON struct {
	ID             uint64   `json:"id"`
	ParentID       uint64   `json:"parent_id"`
	RootID         uint64   `json:"root_id"`
	Type           string   `json:"type"`
	State          string   `json:"state"`
	Owner          string   `json:"owner"`
	Nonce          string   `json:"nonce"`
	SubmittedAt    string   `json:"submitted_at"`
	UpdatedAt      string   `json:"updated_at"`
	FinishedAt     string   `json:"finished_at,omitempty"`
	Error          string   `json:"error,omitempty"`
	ErrorCode      string   `json:"error_code,omitempty"`
	Result         string   `json:"result,omitempty"`
	ResultBase64   []byte   `json:"result_base64,omitempty"`
	Paused         bool     `json:"paused"`
	AbortRequested bool     `json:"abort_requested"`
	Children       []uint64 `json:"children"`
	WaitingFor     string   `json:"waiting_for,omitempty"`
	// SummaryOnly: a descendant of a finished root, whose record went
	// with the root's finish, shown from the summary the root keeps of it
	// (no data, history, runs or result).
	SummaryOnly bool `json:"summary_only,omitempty"`
	// SubmittedBy is the identity that submitted it, with access control
	// on: its pause, resume, ack and abort are that identity's.
	SubmittedBy string `json:"submitted_by,omitempty"`
	// Truncated: the master cut a field too long for an answer (a record
	// stored before requests were bounded): see docs/security.md.
	Truncated bool `json:"truncated,omitempty"`
	// Runs says which master made which of its writes (a failover shows
	// as a second run).
	Runs []runJSON `json:"runs,omitempty"`
	// ChildProcedures is set on proc get's answer: the children's states.
	ChildProcedures *[]childJSON `json:"child_procedures,omitempty"`
	// History is set on proc get's answer: the procedure's timeline.
	History *[]transitionJSON `json:"history,omitempty"`
	// Read is set on proc get's answer: how the read was served.
	Read *readJSON `json:"read,omitempty"`
}

// runJSON is a stretch of a procedure's writes made by one master.
type runJSON struct {
	Node       string `json:"node"`
	FirstWrite uint32 `json:"first_write"`
	LastWrite  uint32 `json:"last_write"`
	StartedAt  string `json:"started_at"`
	LastAt     string `json:"last_at"`
}

func msTime(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func toProcJSON(p *adminpb.Procedure) procJSON {
	j := procJSON{
		ID: p.GetId(), ParentID: p.GetParentId(), RootID: p.GetRootId(), Type: p.GetType(), State: p.GetState(),
		Owner: p.GetOwner(), Nonce: p.GetNonce(), SubmittedAt: msTime(p.GetSubmittedUnixMs()),
		UpdatedAt: msTime(p.GetUpdatedUnixMs()), FinishedAt: msTime(p.GetFinishedUnixMs()), Error: p.GetError(), ErrorCode: p.GetErrorCode(),
		Read:   toReadJSON(p.GetRead()),
		Paused: p.GetPaused(), AbortRequested: p.GetAbortRequested(), Children: p.GetChildren(), WaitingFor: p.GetWaitingFor(),
		SummaryOnly: p.GetSummaryOnly(), SubmittedBy: p.GetSubmittedBy(), Truncated: p.GetTruncated(),
	}
	if j.Children == nil {
		j.Children = []uint64{}
	}
	for _, r := range p.GetRuns() {
		j.Runs = append(j.Runs, runJSON{Node: r.GetNode(), FirstWrite: r.GetFirstWrite(), LastWrite: r.GetLastWrite(),
			StartedAt: msTime(r.GetStartedUnixMs()), LastAt: msTime(r.GetLastUnixMs())})
	}
	if r := p.GetResult(); len(r) > 0 {
		if utf8.Valid(r) {
			j.Result = string(r)
		} else {
			j.ResultBase64 = r
		}
	}
	return j
}

// printProc prints one procedure as "key value" lines.
func (c *cli) printProc(p *adminpb.Procedure) {
	j := toProcJSON(p)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(c.stdout, "%-12s %s\n", k, v)
		}
	}
	line("id", strconv.FormatUint(j.ID, 10))
	line("type", j.Type)
	state := j.State
	var flags []string
	if j.Paused {
		flags = append(flags, "paused")
	}
	if j.AbortRequested {
		flags = append(flags, "abort requested")
	}
	if len(flags) > 0 {
		state += " (" + strings.Join(flags, ", ") + ")"
	}
	line("state", state)
	line("waiting for", j.WaitingFor)
	if j.ParentID != 0 {
		line("parent", strconv.FormatUint(j.ParentID, 10))
	}
	if j.RootID != 0 && j.RootID != j.ID {
		line("root", strconv.FormatUint(j.RootID, 10))
	}
	if len(j.Children) > 0 {
		ids := make([]string, len(j.Children))
		for i, ch := range j.Children {
			ids[i] = strconv.FormatUint(ch, 10)
		}
		line("children", strings.Join(ids, " "))
	}
	line("owner", j.Owner)
	line("submitted by", j.SubmittedBy)
	line("nonce", j.Nonce)
	line("submitted", j.SubmittedAt)
	line("updated", j.UpdatedAt)
	line("finished", j.FinishedAt)
	if j.SummaryOnly {
		line("kept", "a summary: its record went with its root's finish (no data, history or runs)")
	}
	for i, r := range j.Runs {
		key := ""
		if i == 0 {
			key = "ran on"
		}
		writes := fmt.Sprintf("write %d", r.FirstWrite)
		if r.LastWrite != r.FirstWrite {
			writes = fmt.Sprintf("writes %d-%d", r.FirstWrite, r.LastWrite)
		}
		fmt.Fprintf(c.stdout, "%-12s %s: %s, %s to %s\n", key, r.Node, writes, r.StartedAt, r.LastAt)
	}
	line("error", j.Error)
	line("error code", j.ErrorCode)
	line("result", j.Result)
	if j.Truncated {
		line("truncated", "fields longer than an answer carries were cut (a record stored before requests were bounded; docs/security.md)")
	}
	if len(j.ResultBase64) > 0 {
		line("result", fmt.Sprintf("%d bytes (binary; see --json)", len(j.ResultBase64)))
	}
}

var (
	badFlagValue = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-(\S+): (.*)$`)
	unknownFlag  = regexp.MustCompile(`^flag provided but not defined: -+(\S+)$`)
	flagNoValue  = regexp.MustCompile(`^flag needs an argument: -+(\S+)$`)
)

// flagError says a flag package error as the CLI says others: the flag
// with two dashes, the value, and what the flag wants.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if m := unknownFlag.FindStringSubmatch(msg); m != nil {
		return "unknown flag --" + m[1]
	}
	if m := flagNoValue.FindStringSubmatch(msg); m != nil {
		return "--" + m[1] + " needs a value"
	}
	m := badFlagValue.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	value, name, why := m[1], m[2], m[3]
	want := why
	if f := fs.Lookup(name); f != nil {
		switch t := fmt.Sprintf("%T", f.Value); {
		case strings.HasSuffix(t, ".boolValue"):
			want = "want true or false"
		case strings.HasSuffix(t, ".durationValue"):
			want = "want a duration such as 500ms, 30s or 5m"
		case strings.HasSuffix(t, ".intValue"), strings.HasSuffix(t, ".int64Value"):
			want = "want a whole number"
		case strings.HasSuffix(t, ".uintValue"), strings.HasSuffix(t, ".uint64Value"):
			want = "want a whole number, 0 or more"
		case strings.HasSuffix(t, ".float64Value"):
			want = "want a number"
		}
		if why == "value out of range" {
			want = "out of range"
		}
		if want != why && why != "parse error" && why != "value out of range" {
			want += " (" + why + ")"
		}
	}
	return fmt.Sprintf("--%s %s: %s", name, value, want)
}
