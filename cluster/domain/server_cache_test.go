package domain

import "testing"

// The cache answers what the stored value says, whatever it decoded for
// the key before.
func TestServerRecordsFollowTheStoredValue(t *testing.T) {
	kv := map[string][]byte{
		ServerKey("rs1"): mustJSON(Server{Address: "a:1", StartCode: 1, State: ServerLive}),
		ServerKey("rs2"): mustJSON(Server{Address: "a:2", StartCode: 2, State: ServerLive}),
	}
	r := mapReader(kv)
	var c serverRecords
	for range 2 {
		all, err := c.scan(r)
		if err != nil || len(all) != 2 || all["rs1"].StartCode != 1 || all["rs2"].Address != "a:2" {
			t.Fatalf("scan: %v %v", all, err)
		}
	}
	kv[ServerKey("rs1")] = mustJSON(Server{Address: "a:1", StartCode: 7, State: ServerExpired})
	if s, ok, err := c.get(r, "rs1"); err != nil || !ok || s.StartCode != 7 || s.State != ServerExpired {
		t.Fatalf("after a change: %+v %v %v", s, ok, err)
	}
	if _, ok, err := c.get(r, "rs9"); ok || err != nil {
		t.Fatalf("absent server: %v %v", ok, err)
	}
	kv[ServerKey("rs2")] = []byte("{")
	if _, err := c.scan(r); err == nil {
		t.Fatal("a bad record decoded")
	}
}
