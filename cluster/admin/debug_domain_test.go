package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster/domain"
)

// scanningBackend adds a domain scan over kv to fakeBackend.
type scanningBackend struct {
	*fakeBackend
	kv map[string][]byte
}

func (b scanningBackend) DomainScan(prefix string, fn func(string, []byte) bool) {
	keys := make([]string, 0, len(b.kv))
	for k := range b.kv {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !fn(k, b.kv[k]) {
			return
		}
	}
}

// readableDomain is all of a Domain a /debug/domain scan uses: the
// domain's own rendering of its stored values.
type readableDomain struct{ Domain }

func (readableDomain) ReadableValue(k string, v []byte) []byte { return domain.ReadableValue(k, v) }

// /debug/domain shows region records as JSON whichever form they are
// stored in: the domain's binary form, or the JSON of older versions.
func TestDebugDomainShowsRegionRecordsAsJSON(t *testing.T) {
	b := scanningBackend{fakeBackend: &fakeBackend{id: "m0"}, kv: map[string][]byte{
		// The domain's binary form: format 1, OPEN, no flags, server
		// "rs1", start code 12, proc id 0.
		"region/default:t,00000,5": {1, 3, 0, 3, 'r', 's', '1', 12, 0},
		"region/default:t,00001,5": []byte(`{"table":"default:t","state":"OPEN","server":"rs2","start_code":13}`),
	}}
	rec := httptest.NewRecorder()
	HTTPHandler(WithDomain(b, readableDomain{}), nil, WithDebugEndpoints()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/domain?prefix=region/", nil))
	var doc struct {
		Entries map[string]string `json:"entries"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
	}
	want := map[string]uint64{"region/default:t,00000,5": 12, "region/default:t,00001,5": 13}
	for k, sc := range want {
		var r struct {
			Table     string `json:"table"`
			State     string `json:"state"`
			StartCode uint64 `json:"start_code"`
		}
		if err := json.Unmarshal([]byte(doc.Entries[k]), &r); err != nil || r.StartCode != sc || r.State != "OPEN" || r.Table != "default:t" {
			t.Errorf("%s shown as %q (%+v, %v)", k, doc.Entries[k], r, err)
		}
	}
}
