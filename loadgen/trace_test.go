package loadgen

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/arrival"
)

// A trace replays through Run: every arrival is sent once, none before its
// offset (skip and speed applied), in the trace's order where its times differ,
// and the run ends soon after the trace does.
func TestTraceReplay(t *testing.T) {
	tr, err := arrival.ReadTrace(strings.NewReader("t\n0\n0.1\n0.2\n0.2\n0.2\n0.6\n1.0\n1.4\n2.4\n"), "burst.csv", "")
	if err != nil {
		t.Fatal(err)
	}
	// Skip the first arrival, replay twice as fast: 0, 50ms ×3, 250ms, 450ms, 650ms, 1.15s.
	w, err := tr.Window(100*time.Millisecond, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		duration time.Duration
		want     int
	}{{"whole trace", 0, 8}, {"first 0.5 s", 500 * time.Millisecond, 6}} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, &testServer{})
			began := time.Now()
			rep, err := Run(t.Context(), Options{Target: ts.URL, Session: "s", Arrival: "trace", Trace: w,
				Duration: tc.duration, SLO: time.Second, Payloads: fp32Payload(t)})
			if err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(began)
			checkCounts(t, rep)
			if rep.Sent != int64(tc.want) || rep.OK != int64(tc.want) {
				t.Fatalf("sent %d, ok %d; want %d each (errors %v)", rep.Sent, rep.OK, tc.want, rep.Errors)
			}
			ts.mu.Lock()
			bodies, at := append([]inferBody(nil), ts.bodies...), append([]time.Time(nil), ts.at...)
			ts.mu.Unlock()
			recv := make([]time.Duration, tc.want) // request id → received, from began
			for i, b := range bodies {
				id, err := strconv.Atoi(b.ID)
				if err != nil || id < 0 || id >= tc.want {
					t.Fatalf("request id %q, want 0..%d", b.ID, tc.want-1)
				}
				recv[id] = at[i].Sub(began)
			}
			const late = time.Second // a loaded 2-core machine
			for k, r := range recv {
				off := w.Offsets[k]
				if r < off || r > off+late {
					t.Errorf("request %d received %v after the start, want in [%v, %v]", k, r, off, off+late)
				}
				for j := range k {
					if w.Offsets[k]-w.Offsets[j] >= 50*time.Millisecond && recv[j] > r {
						t.Errorf("request %d (at %v) received after request %d (at %v)", j, w.Offsets[j], k, off)
					}
				}
			}
			if span := w.Offsets[tc.want-1]; elapsed > span+5*time.Second {
				t.Errorf("run took %v for a %v trace", elapsed, span)
			}
		})
	}
}

// An MMPP run sends its seeded schedule, at its mean rate.
func TestMMPPRun(t *testing.T) {
	ts := startServer(t, &testServer{lean: true})
	m := arrival.MMPP{BurstRate: 1000, BurstLength: 200 * time.Millisecond, QuietRate: 50, QuietLength: 800 * time.Millisecond}
	o := Options{Target: ts.URL, Session: "s", Arrival: "mmpp", MMPP: m, Seed: 3, Duration: time.Second, SLO: time.Second, Payloads: fp32Payload(t)}
	rep, err := Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep)
	o.setDefaults()
	if n := scheduleLen(o); int64(n) != rep.Sent {
		t.Errorf("sent %d, the seeded schedule has %d", rep.Sent, n)
	}
	if rep.Rate != m.MeanRate() {
		t.Errorf("reported rate %v req/s, want the MMPP's mean %v", rep.Rate, m.MeanRate())
	}
	o.MMPP.BurstRate = 0
	if _, err := Run(t.Context(), o); err == nil || !strings.Contains(err.Error(), "burst rate") {
		t.Errorf("an MMPP without a burst rate: %v, want an error naming it", err)
	}
}

// TestPerSecond: with PerSecond the report splits a trace's requests by the
// second they were due in: refusals and late replies land in their second.
func TestPerSecond(t *testing.T) {
	tr, err := arrival.ReadTrace(strings.NewReader("0\n0.1\n1.2\n1.3\n2.5\n"), "t.txt", "")
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, &testServer{status: func(id int) int {
		if id == 3 {
			return 429
		}
		return 0
	}})
	rep, err := Run(t.Context(), Options{Target: ts.URL, Session: "s", Arrival: "trace", Trace: tr,
		SLO: 5 * time.Second, Payloads: fp32Payload(t), PerSecond: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []Second{{Sent: 2, Within: 2}, {Sent: 2, Within: 1, Refused: 1}, {Sent: 1, Within: 1}}
	if !slices.Equal(rep.Seconds, want) {
		t.Errorf("seconds %+v; want %+v", rep.Seconds, want)
	}
	rep2, err := Run(t.Context(), Options{Target: ts.URL, Session: "s", Arrival: "trace", Trace: tr,
		SLO: 5 * time.Second, Payloads: fp32Payload(t)})
	if err != nil {
		t.Fatal(err)
	}
	if rep2.Seconds != nil {
		t.Errorf("without PerSecond: seconds %+v; want none", rep2.Seconds)
	}
}
