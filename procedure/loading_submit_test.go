package procedure

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/store"
)

// gatedLoadStore is a store whose Load waits for release: the window in
// which a new leader's executor has started but not yet read the store.
type gatedLoadStore struct {
	*store.MemStore
	loading chan struct{} // closed when Load is entered
	release chan struct{}
}

func (s *gatedLoadStore) Load(fn func(store.Proc) error) (store.LoadInfo, error) {
	close(s.loading)
	<-s.release
	return s.MemStore.Load(fn)
}

// TestSubmitWhileLoadingIsRefused: a submission that arrives after Start
// but before the load finished (a leader's services submit crash
// procedures as soon as they start, and a load at a million regions takes
// seconds) is refused with ErrNotStarted, not given id 1: its insert
// overwrote the stored procedure 1, an acknowledged CreateTable, with a
// ServerCrash, and its nonce went unseen by the nonce index. Once loaded,
// the same submission gets an id past every stored one and the stored
// procedures are intact.
func TestSubmitWhileLoadingIsRefused(t *testing.T) {
	mem := store.NewMemStore()
	stored := []record{
		{id: 1, root: 1, typeName: "noop", typeVersion: 1, state: Waiting, stack: []int32{0}, data: []byte(`{}`), owner: "client", nonce: "create"},
		{id: 2, parent: 1, root: 1, typeName: "noop", typeVersion: 1, state: Runnable, data: []byte(`{}`)},
		{id: 7, root: 7, typeName: "noop", typeVersion: 1, state: Runnable, data: []byte(`{}`), owner: "master", nonce: "crash"},
	}
	for _, r := range stored {
		if err := mem.Update(store.Proc{ID: r.id, Data: r.marshal()}); err != nil {
			t.Fatal(err)
		}
	}
	images := map[uint64][]byte{}
	for _, r := range stored {
		img, _ := mem.Proc(r.id)
		images[r.id] = img
	}
	// (The stored procedures run and change their records once loaded,
	// so their images are compared only while the load waits.)
	gs := &gatedLoadStore{MemStore: mem, loading: make(chan struct{}), release: make(chan struct{})}
	x, err := New(Config{RecordFormat: version.Newest, Store: gs, Registry: lifecycleRegistry(t), Env: newDomain(), Workers: 2,
		Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- x.Start() }()
	select {
	case <-gs.loading:
	case <-time.After(time.Minute):
		t.Fatal("Start never loaded the store")
	}
	select {
	case <-x.Loaded():
		t.Fatal("Loaded closed before the load finished")
	default:
	}
	for _, nonce := range []string{"", "crash"} {
		id, err := x.Submit(&noopProc{}, SubmitOptions{Owner: "master", Nonce: nonce})
		if !errors.Is(err, ErrNotStarted) {
			t.Fatalf("submit (nonce %q) while loading: id %d, error %v; want ErrNotStarted", nonce, id, err)
		}
	}
	for id, img := range images {
		if got, ok := mem.Proc(id); !ok || string(got) != string(img) {
			t.Fatalf("stored procedure %d was overwritten while loading", id)
		}
	}
	close(gs.release)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := x.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	select {
	case <-x.Loaded():
	default:
		t.Fatal("Loaded not closed after Start returned")
	}
	// The retried submission of the stored procedure's nonce answers with
	// it; a new one gets an id past every stored one.
	if id, err := x.Submit(&noopProc{}, SubmitOptions{Owner: "master", Nonce: "crash"}); err != nil || id != 7 {
		t.Fatalf("resubmit with the stored nonce: id %d, error %v; want 7", id, err)
	}
	if id, err := x.Submit(&noopProc{}, SubmitOptions{Owner: "master"}); err != nil || id <= 7 {
		t.Fatalf("submit after load: id %d, error %v; want an id past 7", id, err)
	}
	if info, err := x.Get(1); err != nil || info.Type != "noop" || info.Owner != "client" {
		t.Fatalf("procedure 1 after load: %+v, %v; want the stored noop of owner client", info, err)
	}
}
