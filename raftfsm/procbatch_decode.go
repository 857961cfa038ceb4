package raftfsm

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/baton-dev/baton/proto/raftpb"
)

// The field numbers of raftpb.ProcBatch, ProcWrite, Proc and Mutation.
const (
	batchWrites    protowire.Number = 1
	batchFenceTerm protowire.Number = 2

	writeInserts   protowire.Number = 1
	writeUpdates   protowire.Number = 2
	writeDeletes   protowire.Number = 3
	writeMutations protowire.Number = 4

	procID   protowire.Number = 1
	procData protowire.Number = 2

	mutationOp    protowire.Number = 1
	mutationKey   protowire.Number = 2
	mutationValue protowire.Number = 3
)

// unmarshalProcBatch reads a PROC_BATCH payload as proto.Unmarshal reads
// it (a repeated singular field's last value wins, a field of an unknown
// number or of another wire type is skipped, deletes packed or not), but
// with the messages of the whole batch allocated in a few slabs:
// proto.Unmarshal made every message, its pointer slices' growth and its
// bytes apart, on every master for every entry. Procedures' data are
// copied, since the state keeps them, and so are mutations' values, which
// observers are handed; a mutation's key aliases payload, since applying
// it copies it into the state's item (newKVItem) and its WAL note lives
// only until the batch's flush.
func unmarshalProcBatch(payload []byte) (*raftpb.ProcBatch, error) {
	// First pass: how many of each, per write, so that the second fills
	// slabs that never move.
	type counts struct{ procs, inserts, deletes, mutations int }
	var per []counts
	var total counts
	err := walkFields(payload, func(num protowire.Number, typ protowire.Type, _ uint64, v []byte) error {
		if num != batchWrites || typ != protowire.BytesType {
			return nil
		}
		var c counts
		err := walkFields(v, func(num protowire.Number, typ protowire.Type, _ uint64, v []byte) error {
			switch {
			case num == writeInserts && typ == protowire.BytesType:
				c.procs++
				c.inserts++
			case num == writeUpdates && typ == protowire.BytesType:
				c.procs++
			case num == writeDeletes && typ == protowire.VarintType:
				c.deletes++
			case num == writeDeletes && typ == protowire.BytesType:
				for len(v) > 0 {
					_, n := protowire.ConsumeVarint(v)
					if n < 0 {
						return protowire.ParseError(n)
					}
					v = v[n:]
					c.deletes++
				}
			case num == writeMutations && typ == protowire.BytesType:
				c.mutations++
			}
			return nil
		})
		per = append(per, c)
		total.procs += c.procs
		total.deletes += c.deletes
		total.mutations += c.mutations
		return err
	})
	if err != nil {
		return nil, err
	}

	pb := &raftpb.ProcBatch{}
	writes := make([]raftpb.ProcWrite, len(per))
	if len(per) > 0 {
		pb.Writes = make([]*raftpb.ProcWrite, len(per))
	}
	procs := make([]raftpb.Proc, total.procs)
	procPtrs := make([]*raftpb.Proc, total.procs)
	deletes := make([]uint64, 0, total.deletes)
	muts := make([]raftpb.Mutation, total.mutations)
	mutPtrs := make([]*raftpb.Mutation, total.mutations)
	wi := 0
	err = walkFields(payload, func(num protowire.Number, typ protowire.Type, x uint64, v []byte) error {
		switch {
		case num == batchFenceTerm && typ == protowire.VarintType:
			pb.FenceTerm = x
		case num == batchWrites && typ == protowire.BytesType:
			w, c := &writes[wi], per[wi]
			pb.Writes[wi] = w
			wi++
			// Each write's lists are windows of the slabs, capped so that
			// appending to one cannot overwrite the next.
			ins, upd := procPtrs[:c.inserts:c.inserts], procPtrs[c.inserts:c.inserts:c.procs]
			wprocs := procs[:c.procs]
			procPtrs, procs = procPtrs[c.procs:], procs[c.procs:]
			wmuts, wmutPtrs := muts[:c.mutations], mutPtrs[:0:c.mutations]
			muts, mutPtrs = muts[c.mutations:], mutPtrs[c.mutations:]
			wdel := deletes[len(deletes):len(deletes)]
			ni := 0
			err := walkFields(v, func(num protowire.Number, typ protowire.Type, x uint64, v []byte) error {
				switch {
				case (num == writeInserts || num == writeUpdates) && typ == protowire.BytesType:
					p := &wprocs[0]
					wprocs = wprocs[1:]
					if err := unmarshalProc(v, p); err != nil {
						return err
					}
					if num == writeInserts {
						ins[ni] = p
						ni++
					} else {
						upd = append(upd, p)
					}
				case num == writeDeletes && typ == protowire.VarintType:
					wdel = append(wdel, x)
				case num == writeDeletes && typ == protowire.BytesType:
					for len(v) > 0 {
						id, n := protowire.ConsumeVarint(v)
						v = v[n:] // a valid list: the first pass read it
						wdel = append(wdel, id)
					}
				case num == writeMutations && typ == protowire.BytesType:
					m := &wmuts[0]
					wmuts = wmuts[1:]
					if err := unmarshalMutation(v, m); err != nil {
						return err
					}
					wmutPtrs = append(wmutPtrs, m)
				}
				return nil
			})
			if err != nil {
				return err
			}
			if c.inserts > 0 {
				w.Inserts = ins
			}
			if len(upd) > 0 {
				w.Updates = upd
			}
			if len(wdel) > 0 {
				w.Deletes = wdel[:len(wdel):len(wdel)]
				deletes = deletes[:len(deletes)+len(wdel)]
			}
			if len(wmutPtrs) > 0 {
				w.Mutations = wmutPtrs
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return pb, nil
}

func unmarshalProc(b []byte, p *raftpb.Proc) error {
	return walkFields(b, func(num protowire.Number, typ protowire.Type, x uint64, v []byte) error {
		switch {
		case num == procID && typ == protowire.VarintType:
			p.Id = x
		case num == procData && typ == protowire.BytesType:
			p.Data = copyBytes(v)
		}
		return nil
	})
}

func unmarshalMutation(b []byte, m *raftpb.Mutation) error {
	return walkFields(b, func(num protowire.Number, typ protowire.Type, x uint64, v []byte) error {
		switch {
		case num == mutationOp && typ == protowire.VarintType:
			m.Op = raftpb.Mutation_Op(int32(x))
		case num == mutationKey && typ == protowire.BytesType:
			m.Key = v[:len(v):len(v)]
		case num == mutationValue && typ == protowire.BytesType:
			m.Value = copyBytes(v)
		}
		return nil
	})
}

// copyBytes copies v as proto.Unmarshal does a bytes field: nil if empty.
func copyBytes(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return append([]byte(nil), v...)
}

// errFieldNumber is a tag's field number past protowire.MaxValidNumber.
var errFieldNumber = errors.New("field number out of range")

// walkFields calls fn with each field of the message b: a varint's value
// as x, a length-delimited field's bytes as v; fields of other wire types
// are skipped whole.
func walkFields(b []byte, fn func(num protowire.Number, typ protowire.Type, x uint64, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			// ConsumeTag takes numbers up to MaxInt32; proto.Unmarshal,
			// which nodes not yet upgraded decode with, refuses them.
			return errFieldNumber
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			if err := fn(num, typ, x, nil); err != nil {
				return err
			}
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			if err := fn(num, typ, 0, v); err != nil {
				return err
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return nil
}
