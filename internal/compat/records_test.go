package compat_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/cluster/access"
	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/proto/adminpb"
)

// domainState is every domain key a release stored, decoded by the
// current code into its current types.
type domainState struct {
	namespaces []string
	tables     map[string]domain.Table
	regions    map[string]domain.Region
	servers    map[string]domain.Server
	locks      map[uint64]domain.Lock
	bindings   map[string]*adminpb.AclBinding
	tokens     map[string]*adminpb.AclToken
	boot       *access.BootRecord
	audit      []*adminpb.AuditRecord
	// other counts the keys of the prefixes no decoder here knows (the
	// diag types' effects/, the masters' nodes/ addresses).
	other map[string]int
}

// scanner is raftfsm.FSM.Scan.
type scanner func(prefix string, fn func(key string, value []byte) bool)

// readDomain decodes every key scan holds; a key that does not decode
// fails the test.
func readDomain(t *testing.T, version string, scan scanner) domainState {
	t.Helper()
	s := domainState{tables: map[string]domain.Table{}, regions: map[string]domain.Region{}, servers: map[string]domain.Server{},
		locks: map[uint64]domain.Lock{}, bindings: map[string]*adminpb.AclBinding{}, tokens: map[string]*adminpb.AclToken{},
		other: map[string]int{}}
	bad := func(key string, v []byte, err error) {
		t.Errorf("%s: key %q (%q) does not decode with the current code: %v", version, key, v, err)
	}
	strict := func(key string, v []byte, into any) bool {
		// Unknown fields would be a field the current code drops.
		d := json.NewDecoder(strings.NewReader(string(v)))
		d.DisallowUnknownFields()
		if err := d.Decode(into); err != nil {
			bad(key, v, err)
			return false
		}
		return true
	}
	scan("", func(key string, v []byte) bool {
		switch {
		case strings.HasPrefix(key, "ns/"):
			var ns domain.Namespace
			if strict(key, v, &ns) {
				if "ns/"+ns.Name != key {
					bad(key, v, fmt.Errorf("names namespace %q", ns.Name))
				}
				s.namespaces = append(s.namespaces, ns.Name)
			}
		case strings.HasPrefix(key, "table/"):
			var tb domain.Table
			if strict(key, v, &tb) {
				s.tables[strings.TrimPrefix(key, "table/")] = tb
			}
		case strings.HasPrefix(key, "region/"):
			// Regions are stored in a binary form (or, by older code, as
			// JSON): ReadableValue reads either.
			var rg domain.Region
			if strict(key, domain.ReadableValue(key, v), &rg) {
				s.regions[strings.TrimPrefix(key, "region/")] = rg
			}
		case strings.HasPrefix(key, "server/"):
			var sv domain.Server
			if strict(key, v, &sv) {
				s.servers[strings.TrimPrefix(key, "server/")] = sv
			}
		case strings.HasPrefix(key, "lock/"):
			var lk domain.Lock
			id, err := strconv.ParseUint(strings.TrimPrefix(key, "lock/"), 10, 64)
			if err != nil || domain.LockKey(id) != key {
				bad(key, v, fmt.Errorf("lock key: %v", err))
			} else if strict(key, v, &lk) {
				s.locks[id] = lk
			}
		case strings.HasPrefix(key, access.CertPrefix), strings.HasPrefix(key, access.TokenPrefix):
			prefix := access.CertPrefix
			if strings.HasPrefix(key, access.TokenPrefix) {
				prefix = access.TokenPrefix
			}
			if !strict(key, v, &access.Entry{}) {
				break
			}
			switch m := access.DecodeListEntry(prefix, key, v).(type) {
			case *adminpb.AclBinding:
				s.bindings[m.Client] = m
			case *adminpb.AclToken:
				s.tokens[m.Accessor] = m
			default:
				bad(key, v, fmt.Errorf("decodes as %T", m))
			}
		case key == access.BootKey:
			var b access.BootRecord
			if strict(key, v, &b) {
				s.boot = &b
			}
		case strings.HasPrefix(key, access.AuditPrefix), strings.HasPrefix(key, access.RefusedPrefix):
			var r adminpb.AuditRecord
			if err := proto.Unmarshal(v, &r); err != nil {
				bad(key, v, err)
				break
			}
			if len(r.ProtoReflect().GetUnknown()) != 0 {
				bad(key, v, fmt.Errorf("fields the current AuditRecord does not know: %x", r.ProtoReflect().GetUnknown()))
			}
			if k, ok := access.AuditKeyOf(r.Id); !ok || (k != key && strings.Replace(k, access.AuditPrefix, access.RefusedPrefix, 1) != key) {
				bad(key, v, fmt.Errorf("record id %q is not its key's", r.Id))
			}
			s.audit = append(s.audit, &r)
		default:
			prefix, _, _ := strings.Cut(key, "/")
			s.other[prefix]++
		}
		return true
	})
	for prefix := range s.other {
		if prefix != "effects" && prefix != "nodes" {
			t.Errorf("%s: keys under %q/, which no current decoder reads", version, prefix)
		}
	}
	return s
}

// released is what a release listed of its domain and access control
// (its --json listings).
type released struct {
	Namespaces []string `json:"namespaces"`
	Tables     []struct {
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		State       string `json:"state"`
		RegionCount int    `json:"region_count"`
	} `json:"tables"`
	Regions []struct {
		Name   string `json:"name"`
		Table  string `json:"table"`
		State  string `json:"state"`
		Server string `json:"server"`
		ProcID uint64 `json:"proc_id"`
	} `json:"regions"`
	Servers []struct {
		ID        string `json:"id"`
		Address   string `json:"address"`
		StartCode uint64 `json:"start_code"`
	} `json:"servers"`
	Bindings []struct {
		Client     string `json:"client"`
		Permission string `json:"permission"`
		CreatedAt  string `json:"created_at"`
		CreatedBy  string `json:"created_by"`
	} `json:"bindings"`
	Tokens []struct {
		Accessor   string `json:"accessor"`
		Name       string `json:"name"`
		Permission string `json:"permission"`
		CreatedAt  string `json:"created_at"`
		CreatedBy  string `json:"created_by"`
	} `json:"tokens"`
	Records []struct {
		ID         string `json:"id"`
		At         string `json:"at"`
		Principal  string `json:"principal"`
		Method     string `json:"method"`
		Args       string `json:"args"`
		ArgsDigest string `json:"args_digest"`
		Code       string `json:"code"`
		Node       string `json:"node"`
		Peer       string `json:"peer"`
	} `json:"records"`
}

func (g *golden) released(t *testing.T) released {
	t.Helper()
	var r released
	for _, f := range []string{"namespaces.json", "tables.json", "regions.json", "servers.json", "acl.json", "audit.json"} {
		readJSON(t, g.path(f), &r)
	}
	return r
}

// seconds is a release's listed time, to the second.
func seconds(t *testing.T, s string) int64 {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("listed time %q: %v", s, err)
	}
	return at.Unix()
}

// TestGoldenDomainAndAccess reads every domain key of the release's local
// WAL into the current domain and access types, and checks it against
// what the release itself listed: namespaces, tables, regions, region
// servers, the held lock, ACL bindings and tokens, the bootstrap record
// and the audit trail.
func TestGoldenDomainAndAccess(t *testing.T) {
	eachRelease(t, func(t *testing.T, g *golden) {
		s := readDomain(t, g.version, openFSM(t, g).Scan)
		r := g.released(t)

		for _, ns := range r.Namespaces {
			if ns != "default" && !slices.Contains(s.namespaces, ns) {
				t.Errorf("%s: namespace %q listed, not read", g.version, ns)
			}
		}
		if len(s.namespaces) != len(r.Namespaces)-1 {
			t.Errorf("%s: namespaces read %v, listed %v (and the implicit default)", g.version, s.namespaces, r.Namespaces)
		}
		if len(s.tables) != len(r.Tables) {
			t.Errorf("%s: %d tables read, %d listed", g.version, len(s.tables), len(r.Tables))
		}
		for _, lt := range r.Tables {
			tb, ok := s.tables[domain.FullTableName(lt.Namespace, lt.Name)]
			if !ok || tb.State != lt.State || tb.RegionCount != lt.RegionCount {
				t.Errorf("%s: table %s:%s read as %+v (found %v), listed %+v", g.version, lt.Namespace, lt.Name, tb, ok, lt)
			}
		}
		if len(s.regions) != len(r.Regions) {
			t.Errorf("%s: %d regions read, %d listed", g.version, len(s.regions), len(r.Regions))
		}
		for _, lr := range r.Regions {
			rg, ok := s.regions[lr.Name]
			if !ok || rg.Table != lr.Table || rg.State != lr.State || rg.Server != lr.Server || rg.ProcID != lr.ProcID {
				t.Errorf("%s: region %s read as %+v (found %v), listed %+v", g.version, lr.Name, rg, ok, lr)
			}
		}
		if len(s.servers) != len(r.Servers) {
			t.Errorf("%s: %d region servers read, %d listed", g.version, len(s.servers), len(r.Servers))
		}
		for _, ls := range r.Servers {
			sv, ok := s.servers[ls.ID]
			if !ok || sv.Address != ls.Address || sv.StartCode != ls.StartCode || sv.State != domain.ServerLive {
				t.Errorf("%s: region server %s read as %+v (found %v), listed %+v", g.version, ls.ID, sv, ok, ls)
			}
		}
		held, ok := s.locks[g.roles.HeldLock]
		if len(s.locks) != 1 || !ok || held.Kind != "table" || !slices.Equal(held.Names, []string{"ns1:done"}) ||
			!held.Exclusive || held.Description != "golden-held" || held.Holder == "" {
			t.Errorf("%s: locks read %+v, want the held lock %d alone", g.version, s.locks, g.roles.HeldLock)
		}

		if len(s.bindings) != len(r.Bindings) {
			t.Errorf("%s: %d bindings read, %d listed", g.version, len(s.bindings), len(r.Bindings))
		}
		for _, lb := range r.Bindings {
			b, ok := s.bindings[lb.Client]
			if !ok || b.Permission != lb.Permission || b.CreatedBy != lb.CreatedBy || b.CreatedUnixMs/1000 != seconds(t, lb.CreatedAt) {
				t.Errorf("%s: binding %s read as %v (found %v), listed %+v", g.version, lb.Client, b, ok, lb)
			}
		}
		// The leader's initial grant is told apart from an AclGrant by the
		// mark 0.1.0 already put in created_by.
		if b := s.bindings["ops"]; b == nil || b.Source != access.SourceInitialGrants {
			t.Errorf("%s: the initial grant's binding read as %v", g.version, b)
		}
		if b := s.bindings["alice"]; b == nil || b.Source != access.SourceGrant {
			t.Errorf("%s: alice's binding read as %v", g.version, b)
		}
		if len(s.tokens) != len(r.Tokens) {
			t.Errorf("%s: %d tokens read, %d listed", g.version, len(s.tokens), len(r.Tokens))
		}
		var bootAcc string
		for _, lt := range r.Tokens {
			tk, ok := s.tokens[lt.Accessor]
			if !ok || tk.Name != lt.Name || tk.Permission != lt.Permission || tk.CreatedBy != lt.CreatedBy ||
				tk.CreatedUnixMs/1000 != seconds(t, lt.CreatedAt) || tk.ExpiresUnixMs != 0 {
				t.Errorf("%s: token %s read as %v (found %v), listed %+v", g.version, lt.Accessor, tk, ok, lt)
			}
			if lt.Name == "bootstrap" {
				bootAcc = lt.Accessor
			}
		}
		if s.boot == nil || s.boot.Accessor != bootAcc || bootAcc == "" || !s.boot.Announced || s.boot.By != "m1" || s.boot.AtMs == 0 {
			t.Errorf("%s: bootstrap record read as %+v, want the listed bootstrap token %q, announced", g.version, s.boot, bootAcc)
		}

		if len(s.audit) != len(r.Records) {
			t.Fatalf("%s: %d audit records read, %d listed", g.version, len(s.audit), len(r.Records))
		}
		for i, lr := range r.Records {
			a := s.audit[i]
			if a.Id != lr.ID || a.Principal != lr.Principal || a.Method != lr.Method || a.Args != lr.Args ||
				a.ArgsDigest != lr.ArgsDigest || a.Code != lr.Code || a.Node != lr.Node || a.Peer != lr.Peer ||
				a.AtUnixMs/1000 != seconds(t, lr.At) || a.Refused {
				t.Errorf("%s: audit record %d read as %v, listed %+v", g.version, i, a, lr)
			}
		}
	})
}
