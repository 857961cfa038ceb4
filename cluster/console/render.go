package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/security"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// templates holds one parsed template set per page: the layout, the
// fragments pages share (parts.html) and the page's own "content".
type templates struct {
	pages map[string]*template.Template
}

func parseTemplates() (*templates, error) {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html")
	if err != nil {
		return nil, fmt.Errorf("console: layout: %w", err)
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	t := &templates{pages: map[string]*template.Template{}}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" || name == "parts" {
			continue
		}
		p, err := template.Must(layout.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, fmt.Errorf("console: page %s: %w", name, err)
		}
		t.pages[name] = p
	}
	return t, nil
}

// render writes page name with data, or a plain error if it fails (the
// page is built in memory first, so a failure sends no half page).
func (c *Console) render(w http.ResponseWriter, code int, name string, data any) {
	t := c.tmpl.pages[name]
	var buf bytes.Buffer
	if t == nil {
		http.Error(w, "console: no page "+name, http.StatusInternalServerError)
		return
	}
	if err := t.ExecuteTemplate(&buf, "layout.html", data); err != nil {
		c.log.Error("rendering a page failed", "page", name, "error", err)
		http.Error(w, "console: rendering "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// base is what every page shows around its content.
type base struct {
	Title   string
	Nav     string
	Header  header
	Stale   *staleBanner
	Refresh int // seconds; 0: the page does not reload itself
	Flash   string
	Errors  []string
	// Maintenance is maintenance mode while it is on (a banner on every
	// page), as this node's replicated state holds it.
	Maintenance *adminpb.Maintenance
	// Repair is the record of the repair that led to this page.
	Repair *repairRow
	// CanAdmin: the user may take the console's actions (every one needs
	// admin) and read the audit trail; without it they are not shown.
	CanAdmin bool
}

// header names the node serving the page and its role.
type header struct {
	NodeID, State, Role string
	Term                uint64
	LeaderID, LeaderURL string
	// ServedBy, AppliedIndex and Consistency describe the page's reads.
	ServedBy     string
	AppliedIndex uint64
	Consistency  string
}

// base builds the frame of a page once its reads are done (they decide
// whether it is stale). refresh: the page shows changing state.
func (c *Console) base(rd *reads, title, nav string, refresh bool) base {
	n := rd.node
	h := header{NodeID: n.GetNodeId(), State: n.GetState(), Role: "standby", Term: n.GetTerm(),
		LeaderID: n.GetLeaderId(), LeaderURL: c.consoleURL(n.GetLeaderHttpAddress())}
	if n.GetState() == "Leader" {
		h.Role = "leader"
	}
	if s := rd.source(); s != nil {
		h.ServedBy, h.AppliedIndex, h.Consistency = s.GetServedBy(), s.GetAppliedIndex(), strings.ToLower(s.GetConsistency().String())
	}
	b := base{Title: title, Nav: nav, Header: h, Stale: rd.banner(), CanAdmin: rd.perm.Covers(security.PermAdmin)}
	if m := n.GetMaintenance(); m.GetOn() {
		b.Maintenance = m
	}
	if rd.record > 0 {
		b.Repair = rd.recordFlash(rd.record)
	}
	if refresh && c.cfg.Refresh > 0 {
		b.Refresh = max(int(c.cfg.Refresh.Round(time.Second)/time.Second), 1)
	}
	return b
}

var funcs = template.FuncMap{
	"ms":              fmtUnixMs,
	"time":            fmtTime,
	"age":             ageOfUnixMs,
	"dur":             func(ms int64) string { return fmtDur(time.Duration(ms) * time.Millisecond) },
	"bytes":           fmtBytes,
	"bytesU":          func(n uint64) string { return fmtBytes(int64(min(n, 1<<62))) },
	"inc":             func(i int) int { return i + 1 },
	"badge":           badge,
	"procURL":         func(id uint64) string { return fmt.Sprintf("/ui/procedures/%d", id) },
	"repairURL":       repairURL,
	"regionActionURL": regionActionURL,
	"serverURL":       serverURL,
	"regionsURL":      func(key, value string) string { return "/ui/regions?" + url.Values{key: {value}}.Encode() },
	"data":            fmtData,
	"lower":           strings.ToLower,
	"capital":         capital,
}

const timeLayout = "2006-01-02 15:04:05.000 UTC"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(timeLayout)
}

func fmtUnixMs(ms int64) string {
	if ms <= 0 {
		return "—"
	}
	return fmtTime(time.UnixMilli(ms))
}

// ageOfUnixMs says how long ago ms was, by this node's clock.
func ageOfUnixMs(ms int64) string {
	if ms <= 0 {
		return "—"
	}
	return fmtDur(time.Since(time.UnixMilli(ms))) + " ago"
}

func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func fmtBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// badge is the CSS class of a state's label: how worried to look.
func badge(state string) string {
	switch strings.ToUpper(state) {
	case "SUCCESS", "OPEN", "ENABLED", "LIVE", "LEADER", "ACQUIRED":
		return "ok"
	case "FAILED", "ROLLEDBACK", "FAILED_OPEN", "EXPIRED", "CANDIDATE", "SHUTDOWN":
		return "bad"
	case "SUSPECT", "UNCONFIRMED", "WAITING", "WAITING_TIMEOUT", "OPENING", "CLOSING", "DISABLING", "ENABLING", "CREATING", "DELETING":
		return "warn"
	}
	return "neutral"
}

// fmtData shows a procedure's persisted state: indented JSON when it is
// JSON, text when it is text, else hex.
func fmtData(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") == nil {
		return out.String()
	}
	if utf8.Valid(b) {
		return string(b)
	}
	return fmt.Sprintf("%x", b)
}

// readOf returns a response's ReadInfo, for read.
func readOf[T interface{ GetRead() *adminpb.ReadInfo }](v T) *adminpb.ReadInfo { return v.GetRead() }

func serverURL(id string) string { return "/ui/servers/" + url.PathEscape(id) }
