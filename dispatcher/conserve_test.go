package dispatcher

import (
	"fmt"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// bigPlan is issue 11's idle plan: one module, SLO 50 ms, planned at 150k
// req/s on 94 machines of batch 16, 8 ms (80% busy at the planned rate).
var bigPlan = api.ModulePlan{Name: "m", Rate: 150000, BudgetMs: 50, Configs: []api.GroupPlan{gp(16, 8, 94, 150000)}}

// Work conservation on a fresh dispatcher: the machines are idle and no load
// has been measured, so nothing waits for batch-mates. The first request
// after start, and each of eight concurrent first requests, are served in
// about the batch's compute time (8 ms), at most twice that; a lone request
// later, too. Planned for 150k req/s, the planned rate alone had them wait
// for the deadline flush (42 ms).
func TestFreshDispatcherServesAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first time.Duration // after New
		n     int
	}{
		{"first-request-at-start", 0, 1},
		{"first-request-after-1s", time.Second, 1},
		{"eight-concurrent-after-100ms", 100 * time.Millisecond, 8},
		{"eight-concurrent-at-start", 0, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewVirtualClock(t0)
			s := &vsender{clock: clock}
			d, err := New(bigPlan, Options{Flush: FlushIdle, Clock: clock, Sender: s})
			if err != nil {
				t.Fatal(err)
			}
			tr := newTracker()
			var items []*Item
			for range tc.n {
				it := tr.item(time.Time{})
				items = append(items, it)
				submitAt(t, clock, d, tc.first, it, nil)
			}
			lone := tr.item(time.Time{})
			submitAt(t, clock, d, tc.first+5*time.Second, lone, nil)
			clock.Run(t0.Add(10 * time.Second))
			for i, it := range append(items, lone) {
				if it.Err != nil || it.Finished.Sub(it.Arrival) > 16*time.Millisecond {
					t.Errorf("item %d: %v after %v; want served within 2 × 8 ms", i, it.Err, it.Finished.Sub(it.Arrival))
				}
			}
		})
	}
}

// A closed-loop client (each connection sends its next request when the
// last is answered) on the idle 150k plan: 1, 4 and 32 connections for 2 s.
// Every request is served within 2 × the 8 ms compute time: the measured
// load, far below the plan, never needs full batches.
func TestClosedLoopOnAnIdlePlan(t *testing.T) {
	for _, conns := range []int{1, 4, 32} {
		t.Run(fmt.Sprint(conns), func(t *testing.T) {
			clock := NewVirtualClock(t0)
			d, err := New(bigPlan, Options{Flush: FlushIdle, Clock: clock, Sender: &vsender{clock: clock}})
			if err != nil {
				t.Fatal(err)
			}
			end := t0.Add(2 * time.Second)
			var n int
			var worst time.Duration
			var done func(*Item)
			done = func(it *Item) {
				n++
				worst = max(worst, it.Finished.Sub(it.Arrival))
				if it.Finished.Before(end) {
					*it = Item{Done: done}
					if err := d.Submit(it); err != nil {
						t.Error(err)
					}
				}
			}
			clock.AfterFunc(100*time.Millisecond, func() {
				for range conns {
					if err := d.Submit(&Item{Done: done}); err != nil {
						t.Error(err)
					}
				}
			})
			clock.Run(end.Add(time.Second))
			if worst > 16*time.Millisecond {
				t.Errorf("%d connections: %d requests, the slowest took %v; want ≤ 2 × 8 ms", conns, n, worst)
			}
			t.Logf("%d connections: %d requests, slowest %v", conns, n, worst)
		})
	}
}

// scaledSender completes each batch after its slot's duration × scale on a
// virtual clock: a backend slower than its profile, as over gRPC on a loaded
// machine.
type scaledSender struct {
	clock *VirtualClock
	scale float64
}

func (s *scaledSender) Send(b *Batch) {
	s.clock.AfterFunc(time.Duration(float64(b.Slot.Duration)*s.scale), func() { b.Done(nil, nil) })
}

// A closed loop of few connections on one lane (issue 11, the closed-loop
// benchmark of docs/closed-loop.md): one machine of occupancy 0.69, batch 64
// in 2 ms profiled and 3 ms measured, planned for 20k req/s; each of 8 or 32
// connections sends its next request 0.5–1.2 ms (its own) after its answer
// (HTTP and the client). Every client comes back to an idle lane, so the
// guard's recheck decides when the batch goes. Every request is served
// within compute + 5 ms (issue 11's target), and the loop runs at least 60%
// of the rate of a lane that sends each batch as soon as the last client is
// back (N / (3 ms + 1.2 ms)). The recheck armed for a batch's first item and
// never brought forward held each round about 10 ms (32 connections: 2222
// req/s, slowest 14 ms); one truncated by a nanosecond sent a batch at its
// deadline (8 connections: slowest 101 ms).
func TestClosedLoopFewConnectionsOnOneLane(t *testing.T) {
	plan := api.ModulePlan{Name: "m", Rate: 20000, BudgetMs: 100,
		Configs: []api.GroupPlan{gp(64, 2, 0.69, 20000)}}
	const batch, maxThink = 3 * time.Millisecond, 1200 * time.Microsecond
	for _, conns := range []int{8, 32} {
		t.Run(fmt.Sprint(conns), func(t *testing.T) {
			clock := NewVirtualClock(t0)
			d, err := New(plan, Options{Flush: FlushIdle, Clock: clock, Sender: &scaledSender{clock: clock, scale: 1.5}})
			if err != nil {
				t.Fatal(err)
			}
			start, end := t0.Add(100*time.Millisecond), t0.Add(2100*time.Millisecond)
			warm := start.Add(200 * time.Millisecond)
			var n int
			var worst time.Duration
			var done func(*Item)
			done = func(it *Item) {
				if it.Err != nil {
					t.Error(it.Err)
				}
				if it.Arrival.After(warm) {
					worst = max(worst, it.Finished.Sub(it.Arrival))
					if it.Finished.Before(end) {
						n++
					}
				}
				if it.Finished.Before(end) {
					c := it.Tag.(int)
					think := 500*time.Microsecond + time.Duration(c)*(maxThink-500*time.Microsecond)/time.Duration(conns)
					clock.AfterFunc(think, func() {
						*it = Item{Done: done, Tag: c}
						if err := d.Submit(it); err != nil {
							t.Error(err)
						}
					})
				}
			}
			clock.AfterFunc(start.Sub(t0), func() {
				for c := range conns {
					if err := d.Submit(&Item{Done: done, Tag: c}); err != nil {
						t.Error(err)
					}
				}
			})
			clock.Run(end.Add(time.Second))
			rate := float64(n) / end.Sub(warm).Seconds()
			ideal := float64(conns) / (batch + maxThink).Seconds()
			t.Logf("%d connections: %.0f req/s (%.2f of %.0f), slowest %v, batches closed full/deadline/idle %v",
				conns, rate, rate/ideal, ideal, worst, d.Stats().Closed)
			if worst > batch+5*time.Millisecond {
				t.Errorf("%d connections: slowest request %v; want ≤ compute + 5 ms = %v", conns, worst, batch+5*time.Millisecond)
			}
			if rate < 0.6*ideal {
				t.Errorf("%d connections: %.0f req/s; want ≥ 0.6 × %.0f", conns, rate, ideal)
			}
		})
	}
}
