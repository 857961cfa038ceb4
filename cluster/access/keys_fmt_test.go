package access

// The audit key and retention reads against what they replaced. (Written
// by a reviewer of the change; all held.)

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/baton-dev/baton/proto/adminpb"
)

// fmtAuditKeyOf is AuditKeyOf as it was: fmt.Sscanf and a Sprintf round
// trip.
func fmtAuditKeyOf(id string) (string, bool) {
	var term, n uint64
	if _, err := fmt.Sscanf(id, "%d-%d", &term, &n); err != nil || fmt.Sprintf("%d-%d", term, n) != id {
		return "", false
	}
	return AuditKey(term, n), true
}

// TestAuditKeyOfAgreesWithFmt: every string up to 6 characters over an
// alphabet of digits, signs, separators and spaces, plus the uint64
// boundaries, is decided (and keyed) as the fmt version did.
func TestAuditKeyOfAgreesWithFmt(t *testing.T) {
	alpha := []byte("019-+ _x\n\t")
	check := func(id string) {
		t.Helper()
		k1, ok1 := AuditKeyOf(id)
		k0, ok0 := fmtAuditKeyOf(id)
		if ok1 != ok0 || k1 != k0 {
			t.Fatalf("AuditKeyOf(%q) = %q, %v; old %q, %v", id, k1, ok1, k0, ok0)
		}
	}
	var gen func(prefix []byte, left int)
	gen = func(prefix []byte, left int) {
		check(string(prefix))
		if left == 0 {
			return
		}
		for _, c := range alpha {
			gen(append(prefix, c), left-1)
		}
	}
	gen(nil, 6)
	max := strconv.FormatUint(^uint64(0), 10)
	for _, a := range []string{"0", "1", max, "18446744073709551616", "99999999999999999999", "0x10", "0b1", "1_0", "00", "-0", "+0", "१"} {
		for _, b := range []string{"0", "7", max, "18446744073709551616", "0x10", "1e3", "-1", "1 ", "\n1"} {
			check(a + "-" + b)
		}
	}
}

// TestCommittedUnixMsOnCorruptRecords: random corruptions of a
// record as the trail writes it; every disagreement with proto.Unmarshal
// about whether a record is kept is reported by kind.
func TestCommittedUnixMsOnCorruptRecords(t *testing.T) {
	base, err := proto.Marshal(&adminpb.AuditRecord{Id: "3-9", AtUnixMs: 5, Principal: "p", Method: "SubmitProcedure", Args: `{"a":1}`, Code: "OK", ProcIds: []uint64{1, 300}, Node: "m1", Peer: "1.2.3.4:5", CommittedUnixMs: 1_700_000_000_123, Refused: true})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	disagree := 0
	kinds := map[bool]int{}
	defer func() {
		t.Logf("kept though undecodable: %d for invalid UTF-8, %d otherwise", kinds[true], kinds[false])
	}()
	for range 100_000 {
		v := append([]byte(nil), base...)
		for range 1 + rng.IntN(3) {
			switch rng.IntN(3) {
			case 0:
				v[rng.IntN(len(v))] = byte(rng.IntN(256))
			case 1:
				i := rng.IntN(len(v))
				v = v[:i+copy(v[i:], v[i+1:])]
			case 2:
				v = v[:rng.IntN(len(v)+1)]
			}
			if len(v) == 0 {
				break
			}
		}
		var r adminpb.AuditRecord
		uerr := proto.Unmarshal(v, &r)
		ms, ok := committedUnixMs(v)
		if uerr == nil && (!ok || ms != r.GetCommittedUnixMs()) {
			t.Errorf("decodes (ms %d) but committedUnixMs = %d, %v: %x", r.GetCommittedUnixMs(), ms, ok, v)
		}
		if uerr != nil && ok {
			kinds[strings.Contains(uerr.Error(), "UTF-8")]++
		}
		if (uerr == nil) != ok || (ok && ms != r.GetCommittedUnixMs()) {
			disagree++
			if disagree <= 2 {
				t.Logf("disagreement on %x: Unmarshal err=%v ms=%d; committedUnixMs=%d,%v", v, uerr, r.GetCommittedUnixMs(), ms, ok)
			}
		}
	}
	if disagree > 0 {
		t.Logf("%d of 100000 corruptions judged otherwise than proto.Unmarshal did (a corrupt record kept until its time instead of pruned)", disagree)
	}
}
