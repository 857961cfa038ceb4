package store

// On-disk format of WAL segments.
//
// A segment file pv2-<id, 20 digits>.log is
//
//	header  (headerSize bytes, fixed)
//	frame*  (data records)
//	[trailer frame, footer]   (written when the segment is rolled or closed)
//
// Header (little endian):
//
//	0  [8]byte magic "BTNPV2WL"
//	8  uint32  format version (1)
//	12 uint32  flags: bit 0 (flagUnsyncedAppends) set when the segment was
//	           written under SyncOnRoll; other bits 0 (reserved, ignored)
//	16 uint64  segment id (equals the id in the file name)
//	24 uint64  max proc id known when the segment was created
//	32 uint64  max external index known when the segment was created
//	40 int64   creation time, Unix nanoseconds
//	48 uint32  reserved (0)
//	52 uint32  CRC32C of bytes 0..51
//
// The max id and index in the header keep LoadInfo.MaxID and LoadInfo.Index
// monotonic after every record that carried them has been cleaned away.
//
// flagUnsyncedAppends tells Load that the segment's records were not synced
// one by one, so that after a power loss anything past the last synced byte
// (holes of zeros, stale blocks, later records after a lost page) is an
// interrupted write: when the segment is the newest, Load truncates it at
// its first bad record instead of reporting damage. The header itself is
// always synced before the segment is created, and a segment is synced
// whole before the next is created, so only the newest can be affected.
//
// Frame: uint32 payload length, uint32 CRC32C (Castagnoli) of the payload,
// payload. A data record's payload is
//
//	byte    record type (INSERT, UPDATE, DELETE, BATCH, REWRITE)
//	uvarint external index (0 = none)
//	uvarint number of puts, then per put: uvarint id, uvarint length, bytes
//	uvarint number of deletes, then per delete: uvarint id
//
// INSERT/UPDATE/DELETE/BATCH only describe which Batch fields were set;
// replay treats every put the same way (the image replaces any older one) and
// applies puts before deletes within one record. REWRITE marks images copied
// by cleanup (a merge of segments; before, the straggler rewrite). A record
// is applied all or nothing: its CRC covers all of it.
//
// The trailer is a frame of type TRAILER whose payload is
//
//	byte    TRAILER
//	uvarint max proc id at roll time
//	uvarint max external index at roll time
//	uvarint number of data records in the segment
//	tracker (see tracker.go, encodeTracker)
//
// followed by a fixed footer of footerSize bytes: uint64 offset of the trailer
// frame, uint32 CRC of the trailer payload (as in its frame), uint32 magic
// "PV2T". The footer lets a reader find the tracker from the end of the file
// without replaying the segment.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/baton-dev/baton/internal/enumname"
)

const (
	segMagic        = "BTNPV2WL"
	formatVersion   = 1
	headerSize      = 56
	frameHeaderSize = 8
	footerSize      = 16
	footerMagic     = 0x54325650 // "PV2T" little endian
	// maxPayload bounds one record. Larger writes are refused with ErrInvalid.
	maxPayload = 1 << 30

	// flagUnsyncedAppends: header flag, records appended without a sync
	// each (SyncOnRoll).
	flagUnsyncedAppends = 1 << 0
)

type recType byte

const (
	recInsert  recType = 1
	recUpdate  recType = 2
	recDelete  recType = 3
	recBatch   recType = 4
	recRewrite recType = 5
	recTrailer recType = 6
)

var recTypeNames = []string{
	recInsert: "INSERT", recUpdate: "UPDATE", recDelete: "DELETE",
	recBatch: "BATCH", recRewrite: "REWRITE", recTrailer: "TRAILER",
}

func (t recType) String() string { return enumname.Format(t, recTypeNames, "type(%d)") }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

type segHeader struct {
	flags   uint32
	id      uint64
	maxID   uint64
	index   uint64
	created int64
}

func appendHeader(dst []byte, h segHeader) []byte {
	start := len(dst)
	dst = append(dst, segMagic...)
	dst = binary.LittleEndian.AppendUint32(dst, formatVersion)
	dst = binary.LittleEndian.AppendUint32(dst, h.flags)
	dst = binary.LittleEndian.AppendUint64(dst, h.id)
	dst = binary.LittleEndian.AppendUint64(dst, h.maxID)
	dst = binary.LittleEndian.AppendUint64(dst, h.index)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(h.created))
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	return binary.LittleEndian.AppendUint32(dst, checksum(dst[start:]))
}

func parseHeader(b []byte) (segHeader, error) {
	if len(b) < headerSize {
		return segHeader{}, fmt.Errorf("truncated header (%d of %d bytes)", len(b), headerSize)
	}
	if string(b[:8]) != segMagic {
		return segHeader{}, errors.New("bad header magic")
	}
	if checksum(b[:52]) != binary.LittleEndian.Uint32(b[52:56]) {
		return segHeader{}, errors.New("bad header checksum")
	}
	if v := binary.LittleEndian.Uint32(b[8:12]); v != formatVersion {
		return segHeader{}, fmt.Errorf("unsupported format version %d", v)
	}
	return segHeader{
		flags:   binary.LittleEndian.Uint32(b[12:16]),
		id:      binary.LittleEndian.Uint64(b[16:24]),
		maxID:   binary.LittleEndian.Uint64(b[24:32]),
		index:   binary.LittleEndian.Uint64(b[32:40]),
		created: int64(binary.LittleEndian.Uint64(b[40:48])),
	}, nil
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// batchType names the record type of a batch.
func batchType(b *Batch) recType {
	switch {
	case len(b.Inserts) > 0 && len(b.Updates) == 0 && len(b.Deletes) == 0:
		return recInsert
	case len(b.Inserts) == 0 && len(b.Updates) > 0 && len(b.Deletes) == 0:
		return recUpdate
	case len(b.Inserts) == 0 && len(b.Updates) == 0 && len(b.Deletes) > 0:
		return recDelete
	}
	return recBatch
}

// recordSize returns the payload size of a data record.
func recordSize(index uint64, puts [2][]Proc, dels []uint64) int {
	n := 1 + uvarintLen(index) + uvarintLen(uint64(len(puts[0])+len(puts[1])))
	for _, ps := range puts {
		for _, p := range ps {
			n += uvarintLen(p.ID) + uvarintLen(uint64(len(p.Data))) + len(p.Data)
		}
	}
	n += uvarintLen(uint64(len(dels)))
	for _, id := range dels {
		n += uvarintLen(id)
	}
	return n
}

// appendRecord appends a whole frame (header and payload) for a data record.
// puts[0] and puts[1] are written in this order (inserts, then updates).
func appendRecord(dst []byte, typ recType, index uint64, puts [2][]Proc, dels []uint64) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0, byte(typ))
	dst = binary.AppendUvarint(dst, index)
	dst = binary.AppendUvarint(dst, uint64(len(puts[0])+len(puts[1])))
	for _, ps := range puts {
		for _, p := range ps {
			dst = binary.AppendUvarint(dst, p.ID)
			dst = binary.AppendUvarint(dst, uint64(len(p.Data)))
			dst = append(dst, p.Data...)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(dels)))
	for _, id := range dels {
		dst = binary.AppendUvarint(dst, id)
	}
	return sealFrame(dst, start)
}

// sealFrame fills in the frame header of the frame starting at dst[start:].
func sealFrame(dst []byte, start int) []byte {
	payload := dst[start+frameHeaderSize:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], checksum(payload))
	return dst
}

// trailerInfo is the decoded trailer of a segment.
type trailerInfo struct {
	maxID   uint64
	index   uint64
	records uint64
	tr      *tracker
}

func appendTrailer(dst []byte, offset int64, t trailerInfo) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0, byte(recTrailer))
	dst = binary.AppendUvarint(dst, t.maxID)
	dst = binary.AppendUvarint(dst, t.index)
	dst = binary.AppendUvarint(dst, t.records)
	dst = t.tr.encode(dst)
	dst = sealFrame(dst, start)
	crc := binary.LittleEndian.Uint32(dst[start+4:])
	dst = binary.LittleEndian.AppendUint64(dst, uint64(offset))
	dst = binary.LittleEndian.AppendUint32(dst, crc)
	return binary.LittleEndian.AppendUint32(dst, footerMagic)
}

func decodeTrailer(payload []byte) (trailerInfo, error) {
	var t trailerInfo
	if len(payload) == 0 || recType(payload[0]) != recTrailer {
		return t, errors.New("not a trailer")
	}
	p := payload[1:]
	var n int
	if t.maxID, n = binary.Uvarint(p); n <= 0 {
		return t, errors.New("trailer: bad max id")
	}
	p = p[n:]
	if t.index, n = binary.Uvarint(p); n <= 0 {
		return t, errors.New("trailer: bad index")
	}
	p = p[n:]
	if t.records, n = binary.Uvarint(p); n <= 0 {
		return t, errors.New("trailer: bad record count")
	}
	p = p[n:]
	tr, rest, err := decodeTracker(p)
	if err != nil {
		return t, fmt.Errorf("trailer: %w", err)
	}
	if len(rest) != 0 {
		return t, errors.New("trailer: trailing bytes")
	}
	t.tr = tr
	return t, nil
}

// readTrailerAt decodes the trailer of a segment of the given size from its
// tail, as returned by readAt; it never replays records. It returns the
// trailer and the trailer frame's offset.
func readTrailerAt(size int64, readAt func(p []byte, off int64) error) (trailerInfo, int64, error) {
	if size < headerSize+frameHeaderSize+footerSize {
		return trailerInfo{}, 0, errors.New("no trailer: segment too short")
	}
	var foot [footerSize]byte
	if err := readAt(foot[:], size-footerSize); err != nil {
		return trailerInfo{}, 0, err
	}
	if binary.LittleEndian.Uint32(foot[12:]) != footerMagic {
		return trailerInfo{}, 0, errors.New("no trailer: no footer")
	}
	off := int64(binary.LittleEndian.Uint64(foot[:8]))
	if off < headerSize || off > size-footerSize-frameHeaderSize {
		return trailerInfo{}, 0, errors.New("footer: trailer offset out of range")
	}
	frame := make([]byte, size-footerSize-off)
	if err := readAt(frame, off); err != nil {
		return trailerInfo{}, 0, err
	}
	n := binary.LittleEndian.Uint32(frame[:4])
	crc := binary.LittleEndian.Uint32(frame[4:8])
	if int64(n) != int64(len(frame)-frameHeaderSize) || crc != binary.LittleEndian.Uint32(foot[8:12]) ||
		checksum(frame[frameHeaderSize:]) != crc {
		return trailerInfo{}, 0, errors.New("footer: trailer frame does not match")
	}
	t, err := decodeTrailer(frame[frameHeaderSize:])
	return t, off, err
}

// validateRecord checks the structure of a data record payload without
// allocating. It returns the record type and external index.
func validateRecord(p []byte) (recType, uint64, error) {
	if len(p) == 0 {
		return 0, 0, errors.New("empty record")
	}
	typ := recType(p[0])
	if typ < recInsert || typ > recRewrite {
		return typ, 0, fmt.Errorf("unknown record type %d", byte(typ))
	}
	p = p[1:]
	index, n := binary.Uvarint(p)
	if n <= 0 {
		return typ, 0, errors.New("bad index")
	}
	p = p[n:]
	// Puts and deletes are walked apart, as the record format (frozen since
	// 0.1.0) lays them out; forEachOp walks them again, unchecked, once
	// this has passed.
	nputs, n := binary.Uvarint(p)
	if n <= 0 || nputs > uint64(len(p)) {
		return typ, 0, errors.New("bad put count")
	}
	p = p[n:]
	for i := uint64(0); i < nputs; i++ {
		id, n := binary.Uvarint(p)
		if n <= 0 || id == 0 {
			return typ, 0, errors.New("bad put id")
		}
		p = p[n:]
		l, n := binary.Uvarint(p)
		if n <= 0 || l > uint64(len(p)-n) {
			return typ, 0, errors.New("bad put length")
		}
		p = p[n+int(l):]
	}
	ndels, n := binary.Uvarint(p)
	if n <= 0 || ndels > uint64(len(p)) {
		return typ, 0, errors.New("bad delete count")
	}
	p = p[n:]
	for i := uint64(0); i < ndels; i++ {
		id, n := binary.Uvarint(p)
		if n <= 0 || id == 0 {
			return typ, 0, errors.New("bad delete id")
		}
		p = p[n:]
	}
	if len(p) != 0 {
		return typ, 0, errors.New("trailing bytes in record")
	}
	return typ, index, nil
}

// forEachOp calls put for every image and then del for every delete of a
// payload that passed validateRecord. The data slices alias p.
func forEachOp(p []byte, put func(id uint64, data []byte), del func(id uint64)) {
	p = p[1:]
	_, n := binary.Uvarint(p)
	p = p[n:]
	nputs, n := binary.Uvarint(p)
	p = p[n:]
	for i := uint64(0); i < nputs; i++ {
		id, n := binary.Uvarint(p)
		p = p[n:]
		l, n := binary.Uvarint(p)
		p = p[n:]
		put(id, p[:l:l])
		p = p[l:]
	}
	ndels, n := binary.Uvarint(p)
	p = p[n:]
	for i := uint64(0); i < ndels; i++ {
		id, n := binary.Uvarint(p)
		p = p[n:]
		del(id)
	}
}

// scanProblem describes where and why a scan stopped early.
type scanProblem struct {
	off    int64
	reason string
	// torn reports damage that looks like an interrupted write at the end
	// of the file: an incomplete frame, a bad last frame that ends exactly at
	// the end of the file, or nothing but zero bytes from the damage on.
	torn bool
}

// scanResult is what scanSegment found.
type scanResult struct {
	hdr     segHeader
	hdrErr  error
	goodEnd int64 // end of the last good data record (or of the header)
	records int
	trailer *trailerInfo // set when a complete, valid trailer and footer end the segment
	bad     *scanProblem
}

// scanSegment reads a whole segment held in memory. It calls fn for each data
// record, in file order, with the record's offset and validated payload
// (which aliases data). It never panics and reports only offsets within
// data. An error from fn stops the scan and is returned.
func scanSegment(data []byte, fn func(off int64, typ recType, index uint64, payload []byte) error) (scanResult, error) {
	var r scanResult
	r.hdr, r.hdrErr = parseHeader(data)
	if r.hdrErr != nil {
		return r, nil
	}
	size := int64(len(data))
	off := int64(headerSize)
	r.goodEnd = off
	stop := func(reason string, torn bool) {
		r.bad = &scanProblem{off: off, reason: reason, torn: torn || allZero(data[off:])}
	}
	for off < size {
		if size-off < frameHeaderSize {
			stop("short frame header", true)
			break
		}
		n := int64(binary.LittleEndian.Uint32(data[off:]))
		crc := binary.LittleEndian.Uint32(data[off+4:])
		if n == 0 {
			stop("zero-length frame", false)
			break
		}
		end := off + frameHeaderSize + n
		if end > size {
			stop(fmt.Sprintf("frame length %d exceeds segment", n), true)
			break
		}
		payload := data[off+frameHeaderSize : end]
		if checksum(payload) != crc {
			stop("bad checksum", end == size)
			break
		}
		if recType(payload[0]) == recTrailer {
			t, err := decodeTrailer(payload)
			if err != nil {
				stop(err.Error(), end == size)
				break
			}
			rest := data[end:]
			if len(rest) < footerSize {
				stop("incomplete footer", true)
				break
			}
			if len(rest) > footerSize ||
				binary.LittleEndian.Uint64(rest) != uint64(off) ||
				binary.LittleEndian.Uint32(rest[8:]) != crc ||
				binary.LittleEndian.Uint32(rest[12:]) != footerMagic {
				stop("bad footer", false)
				break
			}
			r.trailer = &t
			return r, nil
		}
		typ, index, err := validateRecord(payload)
		if err != nil {
			stop("malformed record: "+err.Error(), end == size)
			break
		}
		if fn != nil {
			if err := fn(off, typ, index, payload); err != nil {
				return r, err
			}
		}
		r.records++
		off = end
		r.goodEnd = off
	}
	return r, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
