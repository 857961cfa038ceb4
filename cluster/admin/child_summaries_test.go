package admin_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/internal/testwait"
)

// TestListingPagesThroughSummarisedChildren: finished fanouts that ran at
// once (their children's ids interleave with each other's and with other
// roots') are listed with every child once, in id order, from their
// roots' summaries, whatever the page size and direction, on the leader
// (its executor's index) and on a standby serving a stale read (a scan of
// its copy of the records).
func TestListingPagesThroughSummarisedChildren(t *testing.T) {
	fc := clustertest.New(t, clustertest.Config{})
	fc.TransferLeadership(1)
	cl := fc.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var (
		mu    sync.Mutex
		roots []uint64
		wg    sync.WaitGroup
	)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			typ, args := "fanout", map[string]string{"children": fmt.Sprint(2 + i), "steps": "2", "delay": "1ms"}
			if i%3 == 2 {
				typ, args = "sleep", map[string]string{"steps": "1", "delay": "1ms"}
			}
			id, err := cl.Submit(ctx, typ, args, "", "", 0)
			if err != nil {
				t.Error(err)
				return
			}
			if p, err := cl.Wait(ctx, id); err != nil || p.GetState() != client.StateSuccess {
				t.Errorf("%s %d: %v %v", typ, id, p.GetState(), err)
			}
			mu.Lock()
			roots = append(roots, id)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	parentOf := map[uint64]uint64{}
	var want []uint64
	for _, r := range roots {
		p, err := cl.Get(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
		for _, c := range p.GetChildren() {
			want = append(want, c)
			parentOf[c] = r
		}
	}
	slices.Sort(want)

	standby, err := client.New([]string{fc.AdminAddrs()[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	for _, tc := range []struct {
		name string
		cl   *client.Client
		opts []client.ReadOption
	}{
		{"leader", cl, nil},
		{"standby stale", standby, []client.ReadOption{client.Stale()}},
	} {
		for _, newest := range []bool{false, true} {
			for _, size := range []int32{1, 2, 3, 7, 100} {
				t.Run(fmt.Sprintf("%s/newest=%v/page=%d", tc.name, newest, size), func(t *testing.T) {
					exp := slices.Clone(want)
					if newest {
						slices.Reverse(exp)
					}
					testwait.ForNil(t, 30*time.Second, "the listing", func() error {
						all, err := tc.cl.ListAll(ctx, client.ListOptions{PageSize: size, NewestFirst: newest}, tc.opts...)
						if err != nil {
							return err
						}
						var got []uint64
						for _, p := range all {
							got = append(got, p.GetId())
							if parent, ok := parentOf[p.GetId()]; ok && (p.GetParentId() != parent || !p.GetSummaryOnly() || p.GetState() != client.StateSuccess) {
								return fmt.Errorf("child %d listed as %v", p.GetId(), p)
							}
						}
						if !slices.Equal(got, exp) {
							return fmt.Errorf("listed %v, want %v", got, exp)
						}
						return nil
					})
				})
			}
		}
	}
}
