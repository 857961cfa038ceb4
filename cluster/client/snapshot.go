package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/proto/adminpb"
)

// SnapshotSave writes a snapshot file of the cluster's state, streamed by
// the leader (a standby relays it), to w, and returns how many bytes it
// wrote. Opening the stream follows the leader and retries for at most the
// call timeout, as other calls do; once the first bytes are written to w a
// broken stream is an error, not retried: w holds part of a file. ctx
// bounds the whole transfer, which takes as long as the state is large.
//
// The bytes are not judged here: raftfsm.OpenSnapshotFile reads them back
// and verifies the checksum, as the CLI does before it keeps the file.
func (c *Client) SnapshotSave(ctx context.Context, w io.Writer) (int64, error) {
	octx, ocancel := context.WithTimeout(ctx, c.opts.callTimeout)
	defer ocancel()
	var (
		stream interface {
			Recv() (*adminpb.SnapshotChunk, error)
		}
		first  *adminpb.SnapshotChunk
		cancel context.CancelFunc
	)
	err := c.retry(octx, func(a string) error {
		ac, err := c.conn(a)
		if err != nil {
			return err
		}
		sctx, scancel := context.WithCancel(ctx)
		s, err := ac.SnapshotSave(sctx, &adminpb.SnapshotSaveRequest{})
		if err == nil {
			// A refusal (not the leader, permission denied) comes instead
			// of the first chunk.
			first, err = recvWithin(octx, s)
		}
		if err != nil {
			scancel()
			return err
		}
		stream, cancel = s, scancel
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return 0, status.FromContextError(ctx.Err()).Err()
		}
		return 0, err
	}
	defer cancel()
	var n int64
	for chunk := first; ; {
		k, err := w.Write(chunk.GetData())
		n += int64(k)
		if err != nil {
			return n, fmt.Errorf("client: snapshot save: writing: %w", err)
		}
		chunk, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return n, status.FromContextError(ctx.Err()).Err()
			}
			return n, err
		}
	}
}
