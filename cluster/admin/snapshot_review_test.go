package admin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/cluster/domain"
	"github.com/baton-dev/baton/proto/adminpb"
	"github.com/baton-dev/baton/raftfsm"
)

// seedForSave gives the state enough regions that a snapshot outlasts the
// transport's flow-control windows: a reader that stops reading holds the
// leader mid-file.
func seedForSave(t *testing.T, c interface {
	SeedTable(string, string, int, uint64, func(int) domain.Region) []string
}) {
	c.SeedTable("default:big", domain.TableEnabled, 60_000, 7, func(i int) domain.Region {
		return domain.Region{State: domain.RegionOpen, Server: fmt.Sprintf("rs-%02d.baton.internal:16020", i%20), StartCode: 1732500000000, ProcID: 7}
	})
}

// saveRecords lists the leader's audit records of SnapshotSave by
// principal.
func saveRecords(t *testing.T, a adminpb.AdminClient, principal string) ([]*adminpb.AuditRecord, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := a.ListAudit(ctx, &adminpb.ListAuditRequest{Method: "SnapshotSave", PageSize: 100})
	if err != nil {
		return nil, err
	}
	var out []*adminpb.AuditRecord
	for _, r := range resp.GetRecords() {
		if r.GetPrincipal() == principal {
			out = append(out, r)
		}
	}
	return out, nil
}

// A client that goes away mid-stream through a standby ends the leader's
// stream too: the leader's handler returns (and so records the save, as
// cancelled), rather than staying blocked on a flow-control window no one
// will open again.
func TestSnapshotSaveCancelledThroughAStandbyEndsOnTheLeader(t *testing.T) {
	c, pki := ownershipCluster(t)
	seedForSave(t, c)
	li, _ := c.WaitLeader()
	standby := (li + 1) % 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := callAs(t, c, pki, standby, "carol").SnapshotSave(ctx, &adminpb.SnapshotSaveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	c.WaitForNil("the leader's record of the cancelled save", func() error {
		recs, err := saveRecords(t, callAs(t, c, pki, li, "alice"), "client/carol")
		if err != nil {
			return err
		}
		if len(recs) != 1 || recs[0].GetCode() == codes.OK.String() || recs[0].GetNode() != c.Master(li).ID {
			return fmt.Errorf("records of carol's save: %v; want one, by the leader, not OK", recs)
		}
		t.Logf("recorded: %v", recs[0])
		return nil
	})
}

// A leader deposed in the middle of a save: the file is either refused
// (an error, nothing to keep) or whole and good, its header naming the
// term of the read it was taken at; never a mix of two state versions.
func TestSnapshotSaveAcrossALeaderChange(t *testing.T) {
	c, pki := ownershipCluster(t)
	seedForSave(t, c)
	li, _ := c.WaitLeader()
	term := c.Master(li).Node().Raft().CurrentTerm()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := callAs(t, c, pki, li, "carol").SnapshotSave(ctx, &adminpb.SnapshotSaveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	first, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	buf.Write(first.GetData())
	c.TransferLeadership((li + 1) % 3)
	c.SeedRecord("after/the-change", []byte("x"))
	for {
		chunk, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Logf("the save failed once the leader was deposed: %v", err)
			return
		}
		buf.Write(chunk.GetData())
	}
	sr, err := raftfsm.OpenSnapshotFile(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	for {
		e, err := sr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if e.Key == "after/the-change" {
			t.Fatal("the file holds a write made after its read")
		}
	}
	if h := sr.Header(); h.Term != term || h.ServedBy != c.Master(li).ID {
		t.Fatalf("header: term %d, served by %s; want term %d, by %s", h.Term, h.ServedBy, term, c.Master(li).ID)
	}
	t.Logf("the deposed leader finished the file from the state version it read at term %d; status %v", term, status.Code(err))
	c.WaitForNil("the deposed leader's record of the save", func() error {
		ni, _ := c.LeaderNow()
		if ni < 0 {
			return fmt.Errorf("no leader")
		}
		recs, err := saveRecords(t, callAs(t, c, pki, ni, "alice"), "client/carol")
		if err != nil {
			return err
		}
		if len(recs) != 1 {
			return fmt.Errorf("records of carol's save: %v; want one", recs)
		}
		return nil
	})
}
