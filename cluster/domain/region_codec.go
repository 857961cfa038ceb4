package domain

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Region records are the domain's most numerous and most written values:
// one per region, rewritten at every step of every assignment. They are
// stored in a compact binary form (encodeRegion) instead of JSON, which
// was three to four times longer and the largest cost of decoding the
// region scans placement makes. Records written as JSON by older versions
// (their first byte is '{') are still read; the binary form never starts
// with '{'.
//
//	byte 0     format, regionFormatV1
//	byte 1     state (regionStateCodes)
//	byte 2     flags: regionHasTable if the table is stored
//	uvarint    length of the server id, then its bytes
//	uvarint    start code
//	uvarint    proc id
//	[uvarint   length of the table, then its bytes: only with regionHasTable]
//
// The table is not stored when it is the region name's prefix (before the
// first ','), as RegionName makes it: table names have no ','.

const (
	regionFormatV1 byte = 1
	regionHasTable byte = 1
)

// regionStateCodes are the states' codes in the binary form; 0 is none.
// Codes are stored: never renumber one.
var regionStateCodes = map[string]byte{
	RegionOffline: 1, RegionOpening: 2, RegionOpen: 3, RegionClosing: 4, RegionClosed: 5, RegionFailedOpen: 6,
}

// regionStateNames is regionStateCodes reversed.
var regionStateNames = func() [7]string {
	var out [7]string
	for s, c := range regionStateCodes {
		out[c] = s
	}
	return out
}()

// tableOfRegion is the table a region name names ("ns:t" of "ns:t,00003,17").
func tableOfRegion(name string) string {
	if i := strings.IndexByte(name, ','); i >= 0 {
		return name[:i]
	}
	return ""
}

// encodeRegion is the stored form of region name's record rg. A state
// the binary form has no code for (none exists today) is stored as JSON.
func encodeRegion(name string, rg Region) []byte {
	code, ok := regionStateCodes[rg.State]
	if !ok {
		return mustJSON(rg)
	}
	var flags byte
	if rg.Table != tableOfRegion(name) {
		flags |= regionHasTable
	}
	b := make([]byte, 0, 3+1+len(rg.Server)+2*binary.MaxVarintLen64+1+len(rg.Table))
	b = append(b, regionFormatV1, code, flags)
	b = binary.AppendUvarint(b, uint64(len(rg.Server)))
	b = append(b, rg.Server...)
	b = binary.AppendUvarint(b, rg.StartCode)
	b = binary.AppendUvarint(b, rg.ProcID)
	if flags&regionHasTable != 0 {
		b = binary.AppendUvarint(b, uint64(len(rg.Table)))
		b = append(b, rg.Table...)
	}
	return b
}

var errRegionTruncated = errors.New("truncated record")

// decodeRegion reads region name's stored record, binary or JSON.
func decodeRegion(name string, v []byte) (Region, error) {
	rg, err := decodeRegionValue(name, v)
	if err != nil {
		return Region{}, fmt.Errorf("decoding %s: %w", RegionKey(name), err)
	}
	return rg, nil
}

func decodeRegionValue(name string, v []byte) (Region, error) {
	if len(v) > 0 && v[0] == '{' {
		var rg Region
		err := json.Unmarshal(v, &rg)
		return rg, err
	}
	if len(v) < 3 {
		return Region{}, errRegionTruncated
	}
	if v[0] != regionFormatV1 {
		return Region{}, fmt.Errorf("unknown region record format %d", v[0])
	}
	if int(v[1]) >= len(regionStateNames) || v[1] == 0 {
		return Region{}, fmt.Errorf("unknown region state code %d", v[1])
	}
	rg := Region{State: regionStateNames[v[1]]}
	flags, rest := v[2], v[3:]
	str := func() (string, bool) {
		n, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < n {
			return "", false
		}
		s := string(rest[k : k+int(n)])
		rest = rest[k+int(n):]
		return s, true
	}
	num := func() (uint64, bool) {
		n, k := binary.Uvarint(rest)
		if k <= 0 {
			return 0, false
		}
		rest = rest[k:]
		return n, true
	}
	var ok1, ok2, ok3 bool
	rg.Server, ok1 = str()
	rg.StartCode, ok2 = num()
	rg.ProcID, ok3 = num()
	if !ok1 || !ok2 || !ok3 {
		return Region{}, errRegionTruncated
	}
	if flags&regionHasTable != 0 {
		t, ok := str()
		if !ok {
			return Region{}, errRegionTruncated
		}
		rg.Table = t
	} else {
		rg.Table = tableOfRegion(name)
	}
	return rg, nil
}

// regionStateOf is the state of a stored region record, "" if it cannot
// be read (metrics count states without decoding the rest).
func regionStateOf(v []byte) string {
	if len(v) > 0 && v[0] == '{' {
		var s struct {
			State string `json:"state"`
		}
		if json.Unmarshal(v, &s) != nil {
			return ""
		}
		return s.State
	}
	if len(v) >= 3 && v[0] == regionFormatV1 && int(v[1]) < len(regionStateNames) {
		return regionStateNames[v[1]]
	}
	return ""
}

// ReadableValue is the stored value v of domain key key as a person (or a
// test, through /debug/domain) reads it: JSON, whichever form is stored.
// Values other than region records are returned as they are.
func ReadableValue(key string, v []byte) []byte {
	name, ok := strings.CutPrefix(key, regionPrefix)
	if !ok || len(v) == 0 || v[0] == '{' {
		return v
	}
	rg, err := decodeRegionValue(name, v)
	if err != nil {
		return v
	}
	return mustJSON(rg)
}

// ReadableValue is the package's ReadableValue, for the admin API's
// /debug/domain, which reaches the domain through an interface.
func (d *Domain) ReadableValue(key string, v []byte) []byte { return ReadableValue(key, v) }
