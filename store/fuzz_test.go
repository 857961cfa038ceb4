package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// seedSegments builds segment images for the fuzz corpus: valid ones with
// and without trailer, torn ones, and damaged ones.
func seedSegments() map[string][]byte {
	hdr := appendHeader(nil, segHeader{id: 7, maxID: 3, index: 9, created: 1})
	seg := slices2(hdr)
	seg = appendRecord(seg, recInsert, 10, [2][]Proc{{{ID: 4, Data: []byte("parent")}, {ID: 5, Data: []byte("child")}}}, nil)
	seg = appendRecord(seg, recUpdate, 0, [2][]Proc{nil, {{ID: 4, Data: bytes.Repeat([]byte("u"), 40)}}}, nil)
	seg = appendRecord(seg, recBatch, 11, [2][]Proc{{{ID: 6, Data: nil}}, {{ID: 5, Data: []byte("c2")}}}, []uint64{4})
	seg = appendRecord(seg, recDelete, 12, [2][]Proc{}, []uint64{5, 1 << 40})
	noTrailer := slices2(seg)
	tr := newTracker()
	for _, id := range []uint64{4, 5, 6} {
		tr.put(id)
	}
	tr.delete(4)
	tr.delete(5)
	tr.delete(1 << 40)
	withTrailer := appendTrailer(slices2(seg), int64(len(seg)), trailerInfo{maxID: 1 << 40, index: 12, records: 4, tr: tr})
	flipped := slices2(withTrailer)
	flipped[headerSize+20] ^= 1
	hugeLen := slices2(hdr)
	hugeLen = append(hugeLen, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5)
	return map[string][]byte{
		"valid-trailer":   withTrailer,
		"valid-notrailer": noTrailer,
		"torn-mid-record": noTrailer[:len(noTrailer)-5],
		"torn-frame-head": noTrailer[:headerSize+3],
		"torn-trailer":    withTrailer[:len(withTrailer)-10],
		"zero-tail":       append(slices2(noTrailer), make([]byte, 64)...),
		"bit-flip":        flipped,
		"huge-length":     hugeLen,
		"short-header":    hdr[:30],
		"header-only":     hdr,
	}
}

func slices2(b []byte) []byte { return append([]byte(nil), b...) }

func FuzzReadSegment(f *testing.F) {
	for _, s := range seedSegments() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSegment(t, data)
		// Mutations rarely survive the checksums; also check a copy with
		// every checksum repaired, so the record and trailer decoders are
		// exercised on arbitrary payloads.
		checkSegment(t, repairChecksums(data))
	})
}

// repairChecksums returns a copy of data with a valid header magic, version
// and checksum, and every frame's checksum recomputed.
func repairChecksums(data []byte) []byte {
	d := slices2(data)
	if len(d) < headerSize {
		return d
	}
	copy(d, segMagic)
	binary.LittleEndian.PutUint32(d[8:], formatVersion)
	binary.LittleEndian.PutUint32(d[52:], checksum(d[:52]))
	off := headerSize
	for off+frameHeaderSize <= len(d) {
		n := int(binary.LittleEndian.Uint32(d[off:]))
		if n > len(d)-off-frameHeaderSize {
			break
		}
		crc := checksum(d[off+frameHeaderSize : off+frameHeaderSize+n])
		binary.LittleEndian.PutUint32(d[off+4:], crc)
		end := off + frameHeaderSize + n
		if n > 0 && recType(d[off+frameHeaderSize]) == recTrailer && len(d)-end == footerSize {
			binary.LittleEndian.PutUint64(d[end:], uint64(off))
			binary.LittleEndian.PutUint32(d[end+8:], crc)
			binary.LittleEndian.PutUint32(d[end+12:], footerMagic)
			break
		}
		off = end
	}
	return d
}

func checkSegment(t *testing.T, data []byte) {
	{
		size := int64(len(data))
		records := 0
		r, err := scanSegment(data, func(off int64, typ recType, _ uint64, p []byte) error {
			if off < headerSize || off+frameHeaderSize+int64(len(p)) > size {
				t.Fatalf("record at %d (+%d) outside input of %d bytes", off, len(p), size)
			}
			records++
			forEachOp(p, func(id uint64, d []byte) {
				if id == 0 {
					t.Fatal("put of id 0")
				}
			}, func(id uint64) {
				if id == 0 {
					t.Fatal("delete of id 0")
				}
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.hdrErr != nil {
			return
		}
		if r.goodEnd < headerSize || r.goodEnd > size || records != r.records {
			t.Fatalf("goodEnd %d size %d records %d/%d", r.goodEnd, size, records, r.records)
		}
		if r.bad != nil && (r.bad.off < headerSize || r.bad.off >= size || r.bad.off != r.goodEnd) {
			t.Fatalf("problem offset %d outside input of %d bytes (goodEnd %d)", r.bad.off, size, r.goodEnd)
		}
		// Truncating at goodEnd always leaves a clean segment.
		r2, _ := scanSegment(data[:r.goodEnd], nil)
		if r2.bad != nil || r2.records != r.records {
			t.Fatalf("prefix up to goodEnd not clean: %+v", r2.bad)
		}
		tinfo, off, err := readTrailerAt(size, func(p []byte, off int64) error {
			if off < 0 || off+int64(len(p)) > size {
				return fmt.Errorf("read outside input")
			}
			copy(p, data[off:])
			return nil
		})
		if err == nil {
			if off < headerSize || off >= size {
				t.Fatalf("trailer offset %d outside input", off)
			}
			tinfo.tr.forEach(func(uint64, bool) {})
		}
	}
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzReadSegment when
// BATON_WRITE_FUZZ_CORPUS is set.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("BATON_WRITE_FUZZ_CORPUS") == "" {
		t.Skip("set BATON_WRITE_FUZZ_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzReadSegment")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range seedSegments() {
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSeedSegmentsParse(t *testing.T) {
	seeds := seedSegments()
	r, _ := scanSegment(seeds["valid-trailer"], nil)
	if r.bad != nil || r.trailer == nil || r.records != 4 {
		t.Fatalf("valid-trailer: %+v", r)
	}
	r, _ = scanSegment(seeds["valid-notrailer"], nil)
	if r.bad != nil || r.trailer != nil || r.records != 4 {
		t.Fatalf("valid-notrailer: %+v", r)
	}
	for _, name := range []string{"torn-mid-record", "torn-frame-head", "torn-trailer", "zero-tail", "huge-length"} {
		r, _ = scanSegment(seeds[name], nil)
		if r.bad == nil || !r.bad.torn {
			t.Errorf("%s: not torn: %+v", name, r.bad)
		}
	}
	r, _ = scanSegment(seeds["bit-flip"], nil)
	if r.bad == nil || r.bad.torn || r.bad.off != headerSize {
		t.Errorf("bit-flip: %+v", r.bad)
	}
	if r, _ = scanSegment(seeds["short-header"], nil); r.hdrErr == nil {
		t.Error("short header accepted")
	}
}
