package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// stateViewer is a Backend that reads its replicated state whole at one
// version (nodeBackend); a test's fake need not. ok is false when it
// cannot (a wrapper around a backend that cannot).
type stateViewer interface {
	StateView() (v raftfsm.View, ok bool)
}

// StateView is the node's FSM state now: an immutable version, kept
// unchanged however long it is read.
func (b nodeBackend) StateView() (raftfsm.View, bool) { return b.n.FSM().View(), true }

// StateView passes the wrapped backend's through (stateViewer).
func (b domainBackend) StateView() (raftfsm.View, bool) {
	if sv, ok := b.Backend.(stateViewer); ok {
		return sv.StateView()
	}
	return raftfsm.View{}, false
}

// snapshotChunkMax bounds one SnapshotChunk. The file is written through a
// 64 KiB buffer, so chunks are that size but for a record larger than it.
const snapshotChunkMax = 1 << 20

// SnapshotSave implements adminpb.AdminServer: the leader streams a
// snapshot file (raftfsm's snapfile.go) of its state at a linearizable
// point: after a read index confirmed by a quorum, so the file holds every
// write acknowledged before the call. It is written from that immutable
// state version as the client takes it: gRPC's flow control holds Send
// back, so the leader's memory grows by a buffer, not by the file, and
// applying goes on meanwhile. A standby relays the leader's stream.
func (s *Server) SnapshotSave(req *adminpb.SnapshotSaveRequest, stream grpc.ServerStreamingServer[adminpb.SnapshotChunk]) error {
	ctx := stream.Context()
	viewer, ok := s.b.(stateViewer)
	if ok {
		_, ok = viewer.StateView()
	}
	if !ok {
		return status.Error(codes.Unimplemented, "admin: snapshot save: this master cannot read its state whole")
	}
	if _, err := s.b.Procedures(); err != nil {
		if !isNotLeader(err) {
			return s.toStatus(fmt.Errorf("admin: snapshot save: %w", err))
		}
		// No timeout: a large state takes as long as the client reads.
		_, err := forwardCall(s, ctx, 0, func(ctx context.Context, c adminpb.AdminClient) (struct{}, error) {
			ws, err := c.SnapshotSave(ctx, req)
			if err != nil {
				return struct{}{}, err
			}
			for {
				chunk, err := ws.Recv()
				if errors.Is(err, io.EOF) {
					return struct{}{}, nil
				}
				if err != nil {
					return struct{}{}, err
				}
				if err := stream.Send(chunk); err != nil {
					return struct{}{}, err
				}
			}
		})
		return err
	}
	pt, err := s.snapshotPoint(ctx, s.createdBy(ctx))
	if err != nil {
		return s.toStatus(fmt.Errorf("admin: snapshot save: %w", err))
	}
	h, v := pt.header, pt.view
	start := time.Now()
	w := &chunkSender{stream: stream}
	if err := pt.write(w); err != nil {
		s.log.Warn("snapshot save failed", "index", v.Index(), "sent_bytes", w.sent, "principal", h.TakenBy, "error", err)
		if _, ok := status.FromError(err); ok {
			return err
		}
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return status.Errorf(codes.Internal, "admin: snapshot save: %v", err)
	}
	s.log.Info("snapshot saved", "index", v.Index(), "term", h.Term, "procs", v.NumProcs(), "keys", v.NumKeys(),
		"bytes", w.sent, "took", time.Since(start), "principal", h.TakenBy)
	return nil
}

// snapshotAt is the state read at a linearizable point, with the header
// of the file that holds it: what `snapshot save` streams and a scheduled
// snapshot writes to disk, taken the same way for both.
type snapshotAt struct {
	header raftfsm.SnapshotFileHeader
	view   raftfsm.View
}

// snapshotPoint reads the state at a linearizable point (a read index a
// quorum confirmed, so every write acknowledged before the call is in it)
// and keeps that immutable version for writing. takenBy is the principal
// the header names. The header's Index and counts are the view's.
func (s *Server) snapshotPoint(ctx context.Context, takenBy string) (snapshotAt, error) {
	viewer, ok := s.b.(stateViewer)
	if !ok {
		return snapshotAt{}, errors.New("this master cannot read its state whole")
	}
	ri, err := s.b.LinearizableRead(ctx)
	if err != nil {
		return snapshotAt{}, err
	}
	v, ok := viewer.StateView()
	if !ok {
		return snapshotAt{}, errors.New("this master cannot read its state whole")
	}
	format, _ := cluster.ReadClusterFormat(v.Get)
	h := raftfsm.SnapshotFileHeader{
		ClusterID:     clusterIDOf(v.Get),
		Index:         v.Index(),
		Term:          ri.Term,
		CreatedUnixMs: s.acc.Clock.Now().UnixMilli(),
		TakenBy:       takenBy,
		ServedBy:      s.b.ID(),
		Version:       buildOf(s.b).Version,
		ClusterFormat: uint32(format),
	}
	return snapshotAt{header: h, view: v}, nil
}

// write writes the snapshot file to w (raftfsm.WriteSnapshotFile).
func (p snapshotAt) write(w io.Writer) error { return raftfsm.WriteSnapshotFile(w, p.header, p.view) }

// chunkSender sends what is written to it as SnapshotChunks. Send returns
// once the message is encoded, so p may be reused at once; it blocks while
// the client's flow-control window is full.
type chunkSender struct {
	stream grpc.ServerStreamingServer[adminpb.SnapshotChunk]
	sent   int64
}

func (c *chunkSender) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), snapshotChunkMax)
		if err := c.stream.Send(&adminpb.SnapshotChunk{Data: p[:k]}); err != nil {
			return n, err
		}
		n += k
		c.sent += int64(k)
		p = p[k:]
	}
	return n, nil
}
