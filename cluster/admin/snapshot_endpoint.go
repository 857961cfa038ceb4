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
	ri, err := s.b.LinearizableRead(ctx)
	if err != nil {
		return s.toStatus(fmt.Errorf("admin: snapshot save: %w", err))
	}
	v, _ := viewer.StateView()
	format, _ := cluster.ReadClusterFormat(v.Get)
	h := raftfsm.SnapshotFileHeader{
		ClusterID:     clusterIDOf(v.Get),
		Term:          ri.Term,
		CreatedUnixMs: s.acc.Clock.Now().UnixMilli(),
		TakenBy:       s.createdBy(ctx),
		ServedBy:      s.b.ID(),
		Version:       buildOf(s.b).Version,
		ClusterFormat: uint32(format),
	}
	start := time.Now()
	w := &chunkSender{stream: stream}
	if err := raftfsm.WriteSnapshotFile(w, h, v); err != nil {
		s.log.Warn("snapshot save failed", "index", v.Index(), "sent_bytes", w.sent, "principal", h.TakenBy, "error", err)
		if _, ok := status.FromError(err); ok {
			return err
		}
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return status.Errorf(codes.Internal, "admin: snapshot save: %v", err)
	}
	s.log.Info("snapshot saved", "index", v.Index(), "term", ri.Term, "procs", v.NumProcs(), "keys", v.NumKeys(),
		"bytes", w.sent, "took", time.Since(start), "principal", h.TakenBy)
	return nil
}

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
