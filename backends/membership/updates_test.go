package membership

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// burst gives n snapshots in a row, as a watcher does during a flurry of
// changes, then waits for ctx.
type burst struct {
	n    int
	done chan struct{} // closed after the n-th fn call
}

func (b burst) Watch(ctx context.Context, fn func(Snapshot)) error {
	for i := 0; i < b.n; i++ {
		fn(Snapshot{Members: []Member{{ID: fmt.Sprint(i)}}})
	}
	close(b.done)
	<-ctx.Done()
	return nil
}

type broken struct{}

func (broken) Watch(context.Context, func(Snapshot)) error { return errors.New("no agent configured") }

func TestUpdatesKeepsTheLatest(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	b := burst{n: 50, done: make(chan struct{})}
	ch := Updates(ctx, b)
	<-b.done // the watcher ran ahead of the reader: fn never blocked
	var s Snapshot
	select {
	case s = <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no snapshot")
	}
	if got := s.Members[0].ID; got != "49" {
		t.Errorf("first snapshot read after the burst has member %s; want 49, the latest", got)
	}
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("a snapshot after ctx ended; want the channel closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed after ctx ended")
	}
}

func TestUpdatesWatchFails(t *testing.T) {
	ch := Updates(context.Background(), broken{})
	s, ok := <-ch
	if !ok || !s.Stale || s.Err == nil || s.Err.Error() != "no agent configured" {
		t.Fatalf("got %+v, %v; want one stale snapshot carrying the error", s, ok)
	}
	if _, ok := <-ch; ok {
		t.Error("want the channel closed after the failure")
	}
}
