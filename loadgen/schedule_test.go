package loadgen

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestLateSendsCounted: a schedule faster than the scheduler can release (10⁷
// req/s: one every 100 ns) still sends every request, bunched, and says so in
// late sends and lag.
func TestLateSendsCounted(t *testing.T) {
	o := Options{Arrival: "constant", Rate: 1e7, CV2: 1, Seed: 1, Duration: 3 * time.Millisecond, MaxInflight: 1 << 30}
	n := scheduleLen(o)
	if n != 30000 {
		t.Fatalf("schedule has %d requests, want 10⁷ req/s × 3 ms = 30000", n)
	}
	r := &run{t: nopTransport{}, payloads: []Payload{{}}, ctx: context.Background(), results: make([]atomic.Uint64, n)}
	sent, late, maxLag := r.schedule(o, time.Now(), n)
	r.wg.Wait()
	if sent != n {
		t.Errorf("sent %d of %d", sent, n)
	}
	if late == 0 || maxLag <= LateSendThreshold {
		t.Errorf("late sends %d, worst lag %v; releasing 30000 requests (a goroutine each) takes well over 3 ms, so the last are late", late, maxLag)
	}
	if got := r.finished.Load(); got != int64(n) {
		t.Errorf("%d outcomes recorded, want %d", got, n)
	}
}

// TestSendsNeverEarly: requests go out at their due times, not as fast as the
// scheduler can release them. (How late they are depends on the machine's load,
// which the report shows; it is not asserted here.)
func TestSendsNeverEarly(t *testing.T) {
	o := Options{Arrival: "constant", Rate: 200, CV2: 1, Seed: 1, Duration: 500 * time.Millisecond, MaxInflight: 100}
	n := scheduleLen(o)
	r := &run{t: nopTransport{}, payloads: []Payload{{}}, ctx: context.Background(), results: make([]atomic.Uint64, n)}
	start := time.Now()
	sent, _, _ := r.schedule(o, start, n)
	took := time.Since(start)
	r.wg.Wait()
	if took < 495*time.Millisecond {
		t.Errorf("100 requests at 200 req/s released in %v; the last is due at 495 ms", took)
	}
	if sent != 100 {
		t.Errorf("sent %d, want 100", sent)
	}
}

func TestProgressBar(t *testing.T) {
	ts := startServer(t, &testServer{})
	var buf bytes.Buffer
	rep, err := Run(t.Context(), Options{Target: ts.URL, Session: "s", Rate: 100, Arrival: "constant", Duration: 300 * time.Millisecond, Payloads: fp32Payload(t), Progress: &buf})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK != 30 {
		t.Errorf("ok %d, want 30", rep.OK)
	}
	if !bytes.Contains(buf.Bytes(), []byte("30/30")) {
		t.Errorf("progress bar never showed 30/30:\n%q", buf.String())
	}
}
