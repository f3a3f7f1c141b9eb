package membership

import "context"

// Updates runs m.Watch on a new goroutine until ctx ends and returns a channel
// that holds the latest snapshot: capacity 1, and a snapshot not yet received
// is replaced by a newer one, so a slow reader (the control loop, re-planning)
// never blocks the watcher and always gets the current view. The channel is
// closed once Watch has returned. If Watch fails to start, the channel
// carries one Stale snapshot whose Err is that failure.
func Updates(ctx context.Context, m Membership) <-chan Snapshot {
	ch := make(chan Snapshot, 1)
	put := func(s Snapshot) { // the only sender: drain the stale one, then send
		for {
			select {
			case ch <- s:
				return
			default:
				select {
				case <-ch:
				default:
				}
			}
		}
	}
	go func() {
		defer close(ch)
		if err := m.Watch(ctx, put); err != nil {
			put(Snapshot{Stale: true, Err: err})
		}
	}()
	return ch
}
