package filecare

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// walkBoltPages checks the page structure of the bbolt file at path by
// reading it directly, before bbolt is let near it: bbolt trusts its pages
// (it checksums only its meta pages), and on some damage it faults, panics
// or loops for ever. From the newer valid meta page, every page reachable
// from the root bucket must lie below the high-water mark and inside the
// file, be a branch or leaf page whose elements fit in it, and be reached
// once (a second visit is a cycle). Errors name the page and its offset.
// The layout is bbolt 1.x's (page.go, node.go, db.go).
func walkBoltPages(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	const (
		hdr                = 16 // page header: id, flags, count, overflow
		elem               = 16 // branch and leaf element size
		branchFlag         = 0x01
		leafFlag           = 0x02
		bucketLeafFlag     = 0x01
		metaMagic          = 0xED0CDAED
		checksumOff        = 56 // meta bytes covered by the checksum
		metaSize           = 64
		maxMetaPageSize    = 64 << 10
		defaultMetaReadLen = hdr + metaSize
	)
	type meta struct {
		pageSize                  uint32
		root, freelist, hwm, txid uint64
	}
	readMeta := func(off int64) (meta, error) {
		b := make([]byte, defaultMetaReadLen)
		if _, err := f.ReadAt(b, off); err != nil {
			return meta{}, err
		}
		m := b[hdr:]
		if binary.LittleEndian.Uint32(m[0:]) != metaMagic {
			return meta{}, errors.New("bad magic")
		}
		h := fnv.New64a()
		h.Write(m[:checksumOff])
		if h.Sum64() != binary.LittleEndian.Uint64(m[checksumOff:]) {
			return meta{}, errors.New("bad checksum")
		}
		return meta{
			pageSize: binary.LittleEndian.Uint32(m[8:]),
			root:     binary.LittleEndian.Uint64(m[16:]),
			freelist: binary.LittleEndian.Uint64(m[32:]),
			hwm:      binary.LittleEndian.Uint64(m[40:]),
			txid:     binary.LittleEndian.Uint64(m[48:]),
		}, nil
	}
	m0, err0 := readMeta(0)
	if err0 != nil {
		return fmt.Errorf("meta page 0 (offset 0): %w", err0)
	}
	if m0.pageSize < 512 || m0.pageSize > maxMetaPageSize {
		return fmt.Errorf("meta page 0: page size %d", m0.pageSize)
	}
	m := m0
	if m1, err1 := readMeta(int64(m0.pageSize)); err1 == nil && m1.txid > m0.txid {
		m = m1
	}
	ps := int64(m.pageSize)
	if int64(m.hwm)*ps > size {
		return fmt.Errorf("high-water mark page %d lies beyond the file's %d bytes", m.hwm, size)
	}
	seen := map[uint64]bool{}
	var walk func(id uint64, from string) error
	// checkLeaf checks the elements of a leaf's bytes p (a page or an
	// inline bucket's page) and walks the buckets in it.
	var checkPage func(id uint64, p []byte, inline bool) error
	checkPage = func(id uint64, p []byte, inline bool) error {
		if len(p) < hdr {
			return fmt.Errorf("page %d: shorter than its header", id)
		}
		flags, count := binary.LittleEndian.Uint16(p[8:]), int(binary.LittleEndian.Uint16(p[10:]))
		if !inline && binary.LittleEndian.Uint64(p[0:]) != id {
			return fmt.Errorf("page %d (offset %d): header says page %d", id, int64(id)*ps, binary.LittleEndian.Uint64(p[0:]))
		}
		if hdr+count*elem > len(p) {
			return fmt.Errorf("page %d (offset %d): %d elements do not fit", id, int64(id)*ps, count)
		}
		switch {
		case flags&branchFlag != 0:
			if inline {
				return fmt.Errorf("inline bucket in page %d holds a branch page", id)
			}
			for i := range count {
				e := p[hdr+i*elem:]
				if err := walk(binary.LittleEndian.Uint64(e[8:]), fmt.Sprintf("page %d element %d", id, i)); err != nil {
					return err
				}
			}
		case flags&leafFlag != 0:
			for i := range count {
				e := p[hdr+i*elem:]
				eflags := binary.LittleEndian.Uint32(e[0:])
				pos, ks, vs := int(binary.LittleEndian.Uint32(e[4:])), int(binary.LittleEndian.Uint32(e[8:])), int(binary.LittleEndian.Uint32(e[12:]))
				start := hdr + i*elem + pos
				if pos < 0 || ks < 0 || vs < 0 || start+ks+vs > len(p) || start+ks+vs < start {
					return fmt.Errorf("page %d (offset %d): element %d runs off the page", id, int64(id)*ps, i)
				}
				if eflags&bucketLeafFlag == 0 {
					continue
				}
				v := p[start+ks : start+ks+vs]
				if len(v) < 16 {
					return fmt.Errorf("page %d (offset %d): bucket element %d too short", id, int64(id)*ps, i)
				}
				if root := binary.LittleEndian.Uint64(v); root != 0 {
					if err := walk(root, fmt.Sprintf("bucket in page %d", id)); err != nil {
						return err
					}
				} else if err := checkPage(id, v[16:], true); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("page %d (offset %d): type %#x, not a branch or leaf page", id, int64(id)*ps, flags)
		}
		return nil
	}
	walk = func(id uint64, from string) error {
		if id < 2 || id >= m.hwm {
			return fmt.Errorf("%s points to page %d, outside 2..%d", from, id, m.hwm)
		}
		if seen[id] {
			return fmt.Errorf("%s points to page %d (offset %d) a second time: a cycle", from, id, int64(id)*ps)
		}
		seen[id] = true
		h := make([]byte, hdr)
		if _, err := f.ReadAt(h, int64(id)*ps); err != nil {
			return fmt.Errorf("page %d (offset %d): %w", id, int64(id)*ps, err)
		}
		n := (int64(binary.LittleEndian.Uint32(h[12:])) + 1) * ps
		if int64(id)*ps+n > size || id+uint64(n/ps) > m.hwm {
			return fmt.Errorf("page %d (offset %d): its %d overflow pages run past the end", id, int64(id)*ps, n/ps-1)
		}
		p := make([]byte, n)
		if _, err := f.ReadAt(p, int64(id)*ps); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("page %d (offset %d): %w", id, int64(id)*ps, err)
		}
		return checkPage(id, p, false)
	}
	if err := checkFreelist(f, size, ps, m.freelist, m.hwm); err != nil {
		return err
	}
	if m.root == 0 {
		return nil
	}
	return walk(m.root, "the meta page's root")
}

// checkFreelist checks the header of the freelist page the meta page names
// (none when the freelist is not synced): bbolt reads it at open and trusts
// its id, flags and overflow.
func checkFreelist(f *os.File, size, ps int64, id, hwm uint64) error {
	const noFreelist, freelistFlag, hdr = ^uint64(0), 0x10, 16
	if id == noFreelist {
		return nil
	}
	if id < 2 || id >= hwm || int64(id)*ps+hdr > size {
		return fmt.Errorf("meta page: freelist page %d lies outside the file's pages", id)
	}
	h := make([]byte, hdr)
	if _, err := f.ReadAt(h, int64(id)*ps); err != nil {
		return fmt.Errorf("freelist page %d (offset %d): %w", id, int64(id)*ps, err)
	}
	if got := binary.LittleEndian.Uint64(h[0:]); got != id {
		return fmt.Errorf("freelist page %d (offset %d): header says page %d", id, int64(id)*ps, got)
	}
	if binary.LittleEndian.Uint16(h[8:])&freelistFlag == 0 {
		return fmt.Errorf("freelist page %d (offset %d): not flagged as a freelist", id, int64(id)*ps)
	}
	if n := (int64(binary.LittleEndian.Uint32(h[12:])) + 1) * ps; int64(id)*ps+n > size {
		return fmt.Errorf("freelist page %d (offset %d): its %d overflow pages run past the end", id, int64(id)*ps, n/ps-1)
	}
	return nil
}
