// Package console is Baton's web console: server-rendered pages served at
// "/" (and "/ui/...") on every master's HTTP port, for operators who want
// to see inside a running cluster without a terminal.
//
// # Pages
//
//	/                          overview: members, leader, region servers by
//	                           lease state, procedures by state, WAL, alerts
//	/ui/procedures             procedures by state, type, owner and
//	                           submission time, paged; search by id
//	/ui/procedures/{id}        one procedure: arguments, tree, timeline,
//	                           locks held and awaited, error; abort
//	/ui/procedures/{id}/abort  the abort's confirmation (GET) and the abort
//	                           itself (POST, with confirm=yes)
//	/ui/locks                  the lock table and who blocks whom
//	/ui/servers[/{id}]         region servers and their leases
//	/ui/tables, /ui/regions    tables, and regions by table, state, server
//	/ui/repairs                the repair records, newest or paged from the
//	                           first
//
// and the repair kit's actions, each a confirmation page (GET, with the
// leader's dry run) and the call (POST, with confirm=yes):
//
//	/ui/procedures/{id}/bypass      the guarded bypass (override, recursive)
//	/ui/procedures/cancel           cancel by the procedures page's filters
//	/ui/regions/{region}/assign     assign (server, override)
//	/ui/regions/{region}/unassign   unassign (override)
//	/ui/servers/{id}/recover        schedule a server's recovery (override)
//	/ui/maintenance                 maintenance mode on (reason) or off
//
// Pages are html/template documents embedded in the binary, with a small
// style sheet and no script: they read without JavaScript, and those that
// show changing state refresh themselves (a meta refresh) every
// Config.Refresh.
//
// # A client of the admin API
//
// The console reads nothing from the node directly: it is a client of the
// admin gRPC API at the node's own address, and pages, filters and
// consistency are the API's. Reads are linearizable, so on a standby they
// are forwarded to the leader and the console shows what the leader holds.
// When no leader answers within Config.ReadTimeout (this node is cut off,
// an election is under way), a page is read again at STALE from this
// node's own state and says so in a banner: whose state it is, as of when
// this node last heard from the leader, and a link to the console of the
// leader that answers, if any member reports one. A page that went stale
// part way (a leader answered its first reads, not the later ones) is
// described by its stale part: the banner and the footer name this node
// and the index it read at. The lock table and the region servers' leases
// live only in the leader's memory: without a leader those sections say
// they cannot be shown.
//
// # Actions
//
// A page never changes anything on GET. An action (abort, a repair) is a
// POST from a confirmation page whose form carries confirm=yes; a POST
// without it shows the confirmation again, and a POST from another site is
// refused (http.CrossOriginProtection). Actions go through the
// leader-following client (cluster/client), so an abort lands on the
// leader even while leadership moves.
//
// Two ways around the same-origin check are closed too. No page may be
// framed (X-Frame-Options, and CSP frame-ancestors, on every response): a
// confirmation framed by another site under a decoy could be clicked
// unawares, and would post from the console's own origin. And the console
// answers only to its own names in the Host header (IP addresses,
// localhost, the host of Config.AdminAddr and Config.AllowedHosts, to
// which a node adds its HTTP address; security.HostCheck, which a node
// puts in front of every path of its HTTP port too): a site whose name an attacker
// points at the node's address (DNS rebinding) is the console's origin as
// far as the browser knows, and only its name gives it away. Responses
// also carry nosniff and a content security policy that admits the
// console's own style sheet (and an empty data: icon) and nothing else:
// the pages have no script.
//
// A repair's confirmation page first asks the leader for a dry run with
// the options in its query and shows the answer: what would be done, or
// the refusal and its reason (and then nothing to confirm). Its form posts
// the options of that dry run, so what is confirmed is what was shown;
// changing an option is a new dry run. A cancel's filter is evaluated
// again by the leader when it is confirmed, and may match more by then:
// its form posts the ids the dry run listed too, and the confirmation
// cancels those of them that still match, never one submitted since. A
// repair is recorded by the leader in the name "console@<node> (browser
// <address>)": the node records the address its call came from, which is
// the console's, so the browser's is in the name. The page the repair
// leads to reads its record back and says what was done. While
// maintenance mode is on, every page says so in a banner (since when, by
// whom, why), from the node's replicated state.
package console
