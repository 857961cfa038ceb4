package console

import (
	"errors"
	"fmt"
	"github.com/baton-dev/baton/internal/reqlimit"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

// Defaults of Config.
const (
	DefaultRefresh     = 5 * time.Second
	DefaultReadTimeout = 3 * time.Second
	DefaultStuckAfter  = 10 * time.Minute
	DefaultPageSize    = 50
)

// Config configures a Console.
type Config struct {
	// AdminAddr is the node's own admin (gRPC) address: every page is read
	// through it. Required.
	AdminAddr string
	// Refresh is how often the pages that show changing state reload
	// themselves. Default 5 s; negative: never.
	Refresh time.Duration
	// ReadTimeout bounds a page's linearizable reads; when they fail or
	// time out, the page is read at STALE from this node. Default 3 s: a
	// leader answers in milliseconds, so a page waits this long only while
	// no leader does.
	ReadTimeout time.Duration
	// StuckAfter: an unfinished procedure not written for this long is
	// shown as stuck. Default 10 minutes.
	StuckAfter time.Duration
	// PageSize is the procedures list's page size. Default 50.
	PageSize int
	// DialOptions are added to the admin connections' (after
	// client.FailoverDialOptions and plaintext credentials).
	DialOptions []grpc.DialOption
	// TLS says the cluster's HTTP endpoints speak TLS: the links to other
	// members' consoles are https.
	TLS bool
	// AllowedHosts are the names, besides IP addresses, "localhost" and
	// AdminAddr's host, that the console answers to in a request's Host
	// header: host names, or host:port addresses whose host is taken (a
	// node passes its HTTP address). Any other name is refused (403): a
	// page of another site whose name an attacker pointed at this node
	// (DNS rebinding) is same-origin to the browser, so only the Host
	// header tells it from the console's own pages. Default: none.
	AllowedHosts []string
	// Logger. Default: a null logger.
	Logger hclog.Logger
}

// Console serves the web console of one node. Create it with New; it is
// an http.Handler for "/" and "/ui/" (see Mount).
type Console struct {
	cfg  Config
	log  hclog.Logger
	mux  *http.ServeMux
	tmpl *templates

	// self reaches this node alone (reads, its own status): a standby
	// forwards linearizable reads, and a stale read must be its own.
	self adminpb.AdminClient
	cc   *grpc.ClientConn
	// actions follow the leader: an abort retried after a leader change
	// lands on the new one.
	actions *client.Client
	// sameOrigin guards every action's POST.
	sameOrigin *http.CrossOriginProtection
	// guarded is mux behind the check of the Host header, which admits
	// the names of AllowedHosts and AdminAddr.
	guarded http.Handler

	closeOnce sync.Once
}

// New returns a console for the node whose admin API is at cfg.AdminAddr.
// Connections are made lazily: the node need not be up yet.
func New(cfg Config) (*Console, error) {
	if strings.TrimSpace(cfg.AdminAddr) == "" {
		return nil, errors.New("console: Config.AdminAddr is required")
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.StuckAfter <= 0 {
		cfg.StuckAfter = DefaultStuckAfter
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	// AdminAddr may be a gRPC target URI ("dns:///h:7070"), which names
	// no host this way: it only adds what it names.
	names := cfg.AllowedHosts
	if name, err := HostName(cfg.AdminAddr); err == nil && name != "" {
		names = append([]string{name}, names...)
	}
	hosts, err := security.NewHostCheck(cfg.Logger.Named("console"), names...)
	if err != nil {
		return nil, fmt.Errorf("console: Config.AllowedHosts: %w", err)
	}
	tmpl, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	// Every string an answer brings is shown with its control and
	// invisible characters escaped (reqlimit.Escape), as the CLI shows it:
	// html/template escapes markup, not a right-to-left override in an
	// owner or a description stored before identifiers were checked.
	dial := append(append([]grpc.DialOption(nil), cfg.DialOptions...), reqlimit.EscapeAnswers()...)
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, client.FailoverDialOptions()...)
	opts = append(opts, dial...)
	cc, err := grpc.NewClient(cfg.AdminAddr, opts...)
	if err != nil {
		return nil, fmt.Errorf("console: admin address %s: %w", cfg.AdminAddr, err)
	}
	actions, err := client.New([]string{cfg.AdminAddr}, client.WithDialOptions(dial...))
	if err != nil {
		cc.Close()
		return nil, fmt.Errorf("console: %w", err)
	}
	c := &Console{cfg: cfg, log: cfg.Logger.Named("console"), tmpl: tmpl, self: adminpb.NewAdminClient(cc), cc: cc, actions: actions,
		sameOrigin: http.NewCrossOriginProtection()}
	c.routes()
	c.guarded = hosts.Wrap(c.mux, "'baton agent --http-allowed-hosts NAME' (console.Config.AllowedHosts)")
	return c, nil
}

// Close releases the console's connections.
func (c *Console) Close() error {
	var err error
	c.closeOnce.Do(func() { err = errors.Join(c.cc.Close(), c.actions.Close()) })
	return err
}

// ServeHTTP serves the console's pages, to requests that name this node
// in their Host header (Config.AllowedHosts).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// No page may be framed by another site: a framed confirmation is one
	// an operator can be tricked into clicking (clickjacking), and its
	// POST comes from the console's own origin, which CrossOriginProtection
	// lets through. X-Frame-Options is for browsers older than CSP's
	// frame-ancestors. The pages have no script: the policy allows the
	// console's own style sheet, and the empty data: icon that spares the
	// browser a /favicon.ico request.
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	// A console mounted alone (not behind a node's check of every path)
	// still refuses other sites' names.
	c.guarded.ServeHTTP(w, r)
}

// HostName is the host name of a Config.AllowedHosts entry, a name or a
// host:port address, in the form security.HostCheck compares: lower case,
// without a trailing dot. It is "" for an address without a host
// (":7072"), and an error for what is not a host name.
func HostName(s string) (string, error) { return security.HostName(s) }

// Mount returns a handler that serves the console at "/" and under "/ui/",
// and everything else (/status, /readyz, /metrics, /debug/...) with api,
// a node's HTTP handler (admin.HTTPHandler).
func Mount(api http.Handler, c *Console) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", api)
	mux.Handle("/{$}", c)
	mux.Handle("/ui/", c)
	return mux
}
