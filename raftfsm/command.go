package raftfsm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/baton-dev/baton/internal/enumname"
	"github.com/baton-dev/baton/proto/raftpb"
	"github.com/baton-dev/baton/store"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Log entry framing. Every entry Baton writes starts with two magic bytes and
// a format version, then the protobuf Envelope. The prefix makes an entry that
// is not ours (another application's log, garbage, a truncated copy) fail
// with a clear error before protobuf, which accepts many random byte strings
// as valid messages, gets to guess at it.
const (
	magic0, magic1 = 0xBA, 0x70
	// formatVersion is the version of the framing, not of the commands:
	// commands evolve through new CommandType values and new fields.
	formatVersion = 1
	prefixLen     = 3
)

// MaxProcID is the highest procedure id a command may carry. Ids above it are
// reserved for the FSM's own images in the local WAL (see fsm.go).
const MaxProcID = walReservedBase - 1

var (
	// ErrNotCommand is the Apply response for a log entry that is not a Baton
	// command at all: wrong magic, unknown framing version, or a body that
	// does not decode.
	ErrNotCommand = errors.New("raftfsm: log entry is not a Baton command")
	// ErrUnknownCommand is the Apply response for a command of a type this
	// node does not know and that is not marked ignore_if_unknown. The entry
	// is not applied; the node needs upgrading.
	ErrUnknownCommand = errors.New("raftfsm: unknown mandatory command")
	// ErrInvalidCommand is the Apply response for a command of a known type
	// whose content breaks the rules (proc id 0 or reserved, empty key,
	// unknown mutation op). Nothing of it is applied.
	ErrInvalidCommand = errors.New("raftfsm: invalid command")

	// ErrFenced refuses a PROC_BATCH written by an executor of another
	// term than the entry's.
	ErrFenced = errors.New("raftfsm: batch fenced: written for another leader term")
)

// Op is the kind of a domain Mutation.
type Op uint8

const (
	// OpPut sets Key to Value.
	OpPut Op = iota + 1
	// OpDelete removes Key; deleting an absent key is not an error.
	OpDelete
)

var opNames = []string{OpPut: "put", OpDelete: "delete"}

func (o Op) String() string { return enumname.Format(o, opNames, "op(%d)") }

// Mutation is one change to the domain key/value state, committed in the
// same Raft entry as the procedure write it accompanies.
type Mutation struct {
	Op    Op
	Key   string
	Value []byte // for OpPut; callers must not modify it afterwards
}

// Put returns a mutation setting key to value.
func Put(key string, value []byte) Mutation { return Mutation{Op: OpPut, Key: key, Value: value} }

// Del returns a mutation deleting key.
func Del(key string) Mutation { return Mutation{Op: OpDelete, Key: key} }

// Write is what one store call persists: procedure inserts, updates and
// deletes plus domain mutations, applied atomically. Puts (Inserts, then
// Updates) come before Deletes, as in store.Batch; Mutations apply in order.
type Write struct {
	Inserts   []store.Proc
	Updates   []store.Proc
	Deletes   []uint64
	Mutations []Mutation
	// Late, if set, gives more mutations, appended to Mutations as the
	// entry carrying the write is proposed (RaftStore), under the store's
	// Sequencer: for what is numbered in the order the log holds it (the
	// audit trail's records). It must not block, and its keys follow
	// Mutations' rules (a bad one fails the write alone).
	Late func() []Mutation
}

func (w *Write) validate() error {
	for _, ps := range [2][]store.Proc{w.Inserts, w.Updates} {
		for _, p := range ps {
			if err := checkProcID(p.ID); err != nil {
				return err
			}
		}
	}
	for _, id := range w.Deletes {
		if err := checkProcID(id); err != nil {
			return err
		}
	}
	return validMutations(w.Mutations)
}

func validMutations(muts []Mutation) error {
	for _, m := range muts {
		if m.Key == "" {
			return fmt.Errorf("%w: empty mutation key", store.ErrInvalid)
		}
		if m.Op != OpPut && m.Op != OpDelete {
			return fmt.Errorf("%w: mutation op %v", store.ErrInvalid, m.Op)
		}
	}
	return nil
}

func checkProcID(id uint64) error {
	if id == 0 {
		return fmt.Errorf("%w: proc id 0", store.ErrInvalid)
	}
	if id > MaxProcID {
		return fmt.Errorf("%w: proc id %d is in the reserved range above %d", store.ErrInvalid, id, uint64(MaxProcID))
	}
	return nil
}

func (w *Write) toProto() *raftpb.ProcWrite {
	pw := &raftpb.ProcWrite{Deletes: w.Deletes}
	if len(w.Inserts) > 0 {
		pw.Inserts = procsToProto(w.Inserts)
	}
	if len(w.Updates) > 0 {
		pw.Updates = procsToProto(w.Updates)
	}
	if len(w.Mutations) > 0 {
		pw.Mutations = make([]*raftpb.Mutation, len(w.Mutations))
		// One allocation for the messages and one for their keys, not two
		// per mutation.
		pms := make([]raftpb.Mutation, len(w.Mutations))
		keyBytes := 0
		for _, m := range w.Mutations {
			keyBytes += len(m.Key)
		}
		keys := make([]byte, 0, keyBytes)
		for i, m := range w.Mutations {
			pm := &pms[i]
			start := len(keys)
			keys = append(keys, m.Key...)
			pm.Key = keys[start:len(keys):len(keys)]
			switch m.Op {
			case OpPut:
				pm.Op, pm.Value = raftpb.Mutation_OP_PUT, m.Value
			case OpDelete:
				pm.Op = raftpb.Mutation_OP_DELETE
			}
			pw.Mutations[i] = pm
		}
	}
	return pw
}

func procsToProto(ps []store.Proc) []*raftpb.Proc {
	out := make([]*raftpb.Proc, len(ps))
	msgs := make([]raftpb.Proc, len(ps)) // one allocation, not one per proc
	for i, p := range ps {
		msgs[i].Id, msgs[i].Data = p.ID, p.Data
		out[i] = &msgs[i]
	}
	return out
}

// EncodeCommand frames an envelope of type t around payload: the bytes to
// hand to raft.Apply. ignoreIfUnknown lets nodes that do not know t skip it.
func EncodeCommand(t raftpb.CommandType, ignoreIfUnknown bool, payload []byte) ([]byte, error) {
	env := &raftpb.Envelope{Type: t, IgnoreIfUnknown: ignoreIfUnknown, Payload: payload}
	out := make([]byte, prefixLen, prefixLen+proto.Size(env))
	out[0], out[1], out[2] = magic0, magic1, formatVersion
	out, err := proto.MarshalOptions{}.MarshalAppend(out, env)
	if err != nil {
		return nil, fmt.Errorf("raftfsm: encode envelope: %w", err)
	}
	return out, nil
}

// EncodeProcBatch encodes writes as one PROC_BATCH command. The writes are
// not validated here; RaftStore validates each before queueing it.
func EncodeProcBatch(writes ...Write) ([]byte, error) {
	return EncodeFencedProcBatch(0, writes...)
}

// EncodeFencedProcBatch encodes writes that the FSM applies only if the
// entry is in Raft term term (0: no fence).
func EncodeFencedProcBatch(term uint64, writes ...Write) ([]byte, error) {
	pb := &raftpb.ProcBatch{Writes: make([]*raftpb.ProcWrite, len(writes)), FenceTerm: term}
	for i := range writes {
		pb.Writes[i] = writes[i].toProto()
	}
	// The batch is marshalled straight into the envelope: marshalled on
	// its own first, then copied in as the payload, every procedure image
	// of the entry (a big create's spawn carries thousands) was copied
	// twice. The bytes are EncodeCommand's, field for field (type,
	// payload; ignore_if_unknown false is not written).
	size := proto.Size(pb)
	out := make([]byte, prefixLen, prefixLen+2*binary.MaxVarintLen64+2+size)
	out[0], out[1], out[2] = magic0, magic1, formatVersion
	out = protowire.AppendTag(out, envelopeType, protowire.VarintType)
	out = protowire.AppendVarint(out, uint64(raftpb.CommandType_COMMAND_TYPE_PROC_BATCH))
	if size > 0 {
		out = protowire.AppendTag(out, envelopePayload, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(size))
	}
	n := len(out)
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(out, pb)
	if err != nil {
		return nil, fmt.Errorf("raftfsm: encode proc batch: %w", err)
	}
	if len(out)-n != size {
		return nil, fmt.Errorf("raftfsm: encode proc batch: %d bytes, sized %d", len(out)-n, size)
	}
	return out, nil
}

// The Envelope's field numbers (raftpb), for EncodeFencedProcBatch and
// decodeEnvelope.
const (
	envelopeType    protowire.Number = 1
	envelopeIgnore  protowire.Number = 2
	envelopePayload protowire.Number = 3
)

// EncodeNoop encodes a NOOP command.
func EncodeNoop() []byte {
	b, _ := EncodeCommand(raftpb.CommandType_COMMAND_TYPE_NOOP, true, nil) // cannot fail
	return b
}

// decodeEnvelope checks the framing and decodes the envelope. Its
// payload aliases data.
func decodeEnvelope(data []byte) (*raftpb.Envelope, error) {
	if len(data) < prefixLen || data[0] != magic0 || data[1] != magic1 {
		n := min(len(data), prefixLen)
		return nil, fmt.Errorf("%w: bad magic % x", ErrNotCommand, data[:n])
	}
	if data[2] != formatVersion {
		return nil, fmt.Errorf("%w: framing version %d, this node knows %d", ErrNotCommand, data[2], formatVersion)
	}
	// Read by hand, as proto.Unmarshal reads it (the last of a repeated
	// field wins, a field of another wire type is skipped as unknown),
	// but with the payload aliasing data: proto.Unmarshal copied every
	// entry whole on every node before its batch was decoded, which
	// copies what it keeps anyway.
	env := &raftpb.Envelope{}
	err := walkFields(data[prefixLen:], func(num protowire.Number, typ protowire.Type, x uint64, v []byte) error {
		switch {
		case num == envelopeType && typ == protowire.VarintType:
			env.Type = raftpb.CommandType(int32(x))
		case num == envelopeIgnore && typ == protowire.VarintType:
			env.IgnoreIfUnknown = x != 0
		case num == envelopePayload && typ == protowire.BytesType:
			env.Payload = v[:len(v):len(v)]
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: envelope: %w", ErrNotCommand, err)
	}
	return env, nil
}

// decodeProcBatch decodes and validates a PROC_BATCH payload. It checks
// everything before anything is applied, so a bad command is refused whole.
func decodeProcBatch(payload []byte) (*raftpb.ProcBatch, error) {
	pb, err := unmarshalProcBatch(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: proc batch payload: %w", ErrInvalidCommand, err)
	}
	for wi, w := range pb.Writes {
		for _, ps := range [2][]*raftpb.Proc{w.Inserts, w.Updates} {
			for _, p := range ps {
				if err := checkProcID(p.GetId()); err != nil {
					return nil, fmt.Errorf("%w: write %d: %w", ErrInvalidCommand, wi, err)
				}
			}
		}
		for _, id := range w.Deletes {
			if err := checkProcID(id); err != nil {
				return nil, fmt.Errorf("%w: write %d: %w", ErrInvalidCommand, wi, err)
			}
		}
		for mi, m := range w.Mutations {
			if len(m.GetKey()) == 0 {
				return nil, fmt.Errorf("%w: write %d mutation %d: empty key", ErrInvalidCommand, wi, mi)
			}
			switch m.GetOp() {
			case raftpb.Mutation_OP_PUT, raftpb.Mutation_OP_DELETE:
			default:
				// An op added by a newer version: applying the rest without it
				// would diverge from nodes that know it, so refuse the entry.
				return nil, fmt.Errorf("%w: write %d mutation %d: unknown op %d", ErrUnknownCommand, wi, mi, int32(m.GetOp()))
			}
		}
	}
	return pb, nil
}
