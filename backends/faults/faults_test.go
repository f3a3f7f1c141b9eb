package faults_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/faults"
	"github.com/piccolo-serving/piccolo/backends/sim"
)

// profiles: "quick" for the faults that need many calls, "slow" (100ms a
// batch) to measure slow.
const profiles = `
profiles:
  - model: quick
    hardware: v100
    entries:
      - {batch: 4, concurrency: 4, duration: 1ms}
  - model: steady
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 100ms}
`

// faulty is a sim backend with an Injector, served over loopback gRPC.
type faulty struct {
	addr   string
	inj    *faults.Injector
	reg    *prometheus.Registry
	client *backends.Client
}

// fastReconnect makes the client retry a refused backend within 200ms, so a
// test sees service restored soon after a fault is cleared.
var fastReconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
	MinConnectTimeout: 2 * time.Second,
})

// simExec is a sim v100 of profiles.
func simExec(t testing.TB) backends.Executor {
	t.Helper()
	var cfg api.Config
	if err := yaml.Unmarshal([]byte(profiles), &cfg); err != nil {
		t.Fatal(err)
	}
	exec, err := sim.New("v100", cfg.Profiles, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return exec
}

func start(t testing.TB) *faulty {
	t.Helper()
	exec := simExec(t)
	reg := prometheus.NewRegistry()
	inj, err := faults.New(faults.Options{Seed: 7, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := backends.NewServer(inj.Executor(exec), backends.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"quick", "steady"} {
		if _, err := srv.Load(m, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	g := backends.NewGRPCServer(srv, inj.ServerOption())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	flis := inj.Listener(lis)
	go func() { _ = g.Serve(flis) }()
	t.Cleanup(g.Stop)
	c, err := backends.NewClient(lis.Addr().String(), backends.ClientOptions{DialOptions: []grpc.DialOption{fastReconnect}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &faulty{addr: lis.Addr().String(), inj: inj, reg: reg, client: c}
}

func oneItem() [][]api.Tensor {
	return [][]api.Tensor{{{Name: sim.InputName, Datatype: "FP32", Shape: []int64{1, 1}, Data: []byte{0, 0, 128, 63}}}}
}

func (f *faulty) infer(t testing.TB, model string, timeout time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := f.client.Infer(ctx, model, oneItem())
	return err
}

func (f *faulty) set(t testing.TB, s faults.Set) {
	t.Helper()
	if err := f.inj.Set(s); err != nil {
		t.Fatal(err)
	}
}

// eventually calls try until it returns nil or 10s pass; it returns the last error.
func eventually(try func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := try()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRefuse(t *testing.T) {
	f := start(t)
	if err := f.infer(t, "quick", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	f.set(t, faults.Set{Refuse: true})
	// A plain TCP dial is refused: nothing listens on the port.
	if c, err := net.DialTimeout("tcp", f.addr, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial while refusing: %v; want connection refused", err)
	}
	// The client's open connection was closed; its next calls fail without
	// reaching the backend (a call racing the close may see a reset first).
	err := eventually(func() error {
		err := f.infer(t, "quick", 5*time.Second)
		if err == nil {
			return errors.New("call succeeded while refusing")
		}
		if !backends.NotExecuted(err) {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("while refusing: %v; want an error NotExecuted", err)
	}
	err = f.infer(t, "quick", 5*time.Second)
	if !backends.IsTransport(err) || !backends.NotExecuted(err) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("while refusing: %v; want ErrBackendUnavailable, NotExecuted, naming the refused connection", err)
	}
	t.Logf("a client sees: %v", err)
	f.set(t, faults.Set{})
	if err := eventually(func() error { return f.infer(t, "quick", 5*time.Second) }); err != nil {
		t.Fatalf("after clearing refuse: %v", err)
	}
}

func TestReset(t *testing.T) {
	f := start(t)
	f.set(t, faults.Set{Reset: true})
	for i := 0; i < 3; i++ {
		err := f.infer(t, "quick", 5*time.Second)
		if !backends.IsTransport(err) || backends.NotExecuted(err) {
			t.Fatalf("call %d under reset: %v; want ErrBackendUnavailable, not NotExecuted (it may have run)", i, err)
		}
		t.Logf("a client sees: %v", err)
	}
	f.set(t, faults.Set{})
	if err := eventually(func() error { return f.infer(t, "quick", 5*time.Second) }); err != nil {
		t.Fatalf("after clearing reset: %v", err)
	}
}

func TestHang(t *testing.T) {
	f := start(t)
	f.set(t, faults.Set{Hang: true})
	t0 := time.Now()
	err := f.infer(t, "quick", 300*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("under hang: %v; want the caller's deadline", err)
	}
	if el := time.Since(t0); el < 300*time.Millisecond || el > 5*time.Second {
		t.Errorf("hung call returned after %v; want the 300ms deadline", el)
	}
	// A call hanging when hang is cleared goes on and answers.
	done := make(chan error, 1)
	go func() { done <- f.infer(t, "quick", 10*time.Second) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("call answered under hang: %v", err)
	default:
	}
	f.set(t, faults.Set{})
	if err := <-done; err != nil {
		t.Fatalf("hanging call after clearing: %v", err)
	}
}

// TestSlowMultipliesProfiledDuration measures a 100ms batch with and without
// slow=3; the ratio is about 3 (loose bounds for a loaded machine).
func TestSlowMultipliesProfiledDuration(t *testing.T) {
	f := start(t)
	measure := func() time.Duration {
		best := time.Hour
		for i := 0; i < 3; i++ {
			t0 := time.Now()
			if err := f.infer(t, "steady", 10*time.Second); err != nil {
				t.Fatal(err)
			}
			best = min(best, time.Since(t0))
		}
		return best
	}
	base := measure()
	f.set(t, faults.Set{Slow: 3})
	slow := measure()
	ratio := float64(slow) / float64(base)
	t.Logf("batch %v, slow=3 %v: ratio %.2f", base, slow, ratio)
	if ratio < 2.4 || ratio > 3.6 {
		t.Errorf("slow=3 took %.2f× the normal batch (%v vs %v); want about 3×", ratio, slow, base)
	}
	// Two batches at once on one lane take 2× one batch; slowed, 2×3×: a slow
	// batch holds its lane for all its time, as on a slower device.
	pair := func() time.Duration {
		t0 := time.Now()
		var wg sync.WaitGroup
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := f.infer(t, "steady", 10*time.Second); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		return time.Since(t0)
	}
	slowPair := pair()
	f.set(t, faults.Set{})
	basePair := pair()
	ratio = float64(slowPair) / float64(basePair)
	t.Logf("two batches on one lane %v, slow=3 %v: ratio %.2f", basePair, slowPair, ratio)
	if ratio < 2.4 || ratio > 3.6 {
		t.Errorf("two slow=3 batches on one lane took %.2f× two normal ones (%v vs %v); want about 3× (2× if slow did not hold the lane)", ratio, slowPair, basePair)
	}
	if after := measure(); float64(after) > 1.5*float64(base) {
		t.Errorf("after clearing slow a batch takes %v; before, %v", after, base)
	}
}

func TestFailShare(t *testing.T) {
	f := start(t)
	f.set(t, faults.Set{Fail: 0.3})
	const calls = 200
	var failed int
	for i := 0; i < calls; i++ {
		err := f.infer(t, "quick", 5*time.Second)
		if err == nil {
			continue
		}
		if !errors.Is(err, backends.ErrBackendFailed) || backends.IsTransport(err) || !strings.Contains(err.Error(), "Internal") {
			t.Fatalf("failed call: %v; want ErrBackendFailed (INTERNAL), not a transport error", err)
		}
		failed++
	}
	if share := float64(failed) / calls; share < 0.2 || share > 0.4 {
		t.Errorf("fail=0.3 failed %d of %d calls (%.2f)", failed, calls, share)
	}
	f.set(t, faults.Set{Fail: 1})
	if err := f.infer(t, "quick", 5*time.Second); !errors.Is(err, backends.ErrBackendFailed) {
		t.Errorf("fail=1: %v; want ErrBackendFailed", err)
	}
	f.set(t, faults.Set{})
	if err := f.infer(t, "quick", 5*time.Second); err != nil {
		t.Errorf("after clearing fail: %v", err)
	}
}

func TestMalformed(t *testing.T) {
	f := start(t)
	f.set(t, faults.Set{Malformed: true})
	for i, want := range []string{"want 1 rows", "needs 4 bytes"} { // wrong dimension 0, then wrong length
		err := f.infer(t, "quick", 5*time.Second)
		if !errors.Is(err, backends.ErrBackendBadResponse) || !strings.Contains(err.Error(), want) {
			t.Errorf("call %d under malformed: %v; want ErrBackendBadResponse (%q)", i, err, want)
		}
	}
	f.set(t, faults.Set{})
	if err := f.infer(t, "quick", 5*time.Second); err != nil {
		t.Errorf("after clearing malformed: %v", err)
	}
}

// TestFaultsCombine runs slow and fail together, under concurrent calls, and
// changes the faults while calls run.
func TestFaultsCombine(t *testing.T) {
	f := start(t)
	f.set(t, faults.Set{Slow: 2, Fail: 0.5})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				err := f.infer(t, "quick", 5*time.Second)
				if err != nil && !errors.Is(err, backends.ErrBackendFailed) {
					t.Errorf("call: %v", err)
				}
			}
		}()
	}
	f.set(t, faults.Set{Malformed: true, Slow: 2})
	f.set(t, faults.Set{Fail: 0.1})
	wg.Wait()
	f.set(t, faults.Set{})
	if err := f.infer(t, "quick", 5*time.Second); err != nil {
		t.Errorf("after clearing: %v", err)
	}
}

func TestSetNeedsListenerForSocketFaults(t *testing.T) {
	inj, err := faults.New(faults.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []faults.Set{{Refuse: true}, {Reset: true}} {
		if err := inj.Set(s); err == nil || !strings.Contains(err.Error(), "listener") {
			t.Errorf("Set(%v) without a listener: %v; want an error naming the listener", s, err)
		}
	}
	if err := inj.Set(faults.Set{Slow: 0.5}); err == nil || !strings.Contains(err.Error(), "1 ≤ k") {
		t.Errorf("slow=0.5: %v; want the allowed range", err)
	}
	if got := inj.Get(); got != (faults.Set{}) {
		t.Errorf("refused Sets changed the faults to %v", got)
	}
}

// TestSharedSlowsOnlyBesideAnotherModel: shared=2 leaves a model alone on
// the backend at its profile, doubles its batches while another model runs
// batches there, and stops SharedWindow after that one's last batch, loaded
// or not (co-location interference, to rehearse placement's avoidance). The
// window is read on a fake clock the test moves, so a slow host neither
// stretches "beside" past the window nor needs a real wait for "after".
func TestSharedSlowsOnlyBesideAnotherModel(t *testing.T) {
	var now atomic.Int64 // fake time, ns since the Unix epoch
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	inj, err := faults.New(faults.Options{Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := inj.Set(faults.Set{Shared: 2}); err != nil {
		t.Fatal(err)
	}
	x := inj.Executor(simExec(t))
	steady, err := x.Load("steady", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	quick, err := x.Load("quick", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	run := func(m backends.Model) time.Duration {
		t0 := time.Now()
		if _, err := m.Run(context.Background(), oneItem()[0], 1); err != nil {
			t.Fatal(err)
		}
		return time.Since(t0)
	}
	alone := run(steady) // quick loaded, never run
	run(quick)
	now.Add(int64(faults.SharedWindow)) // quick's batch is exactly SharedWindow ago: still beside
	beside := run(steady)
	now.Add(1) // a nanosecond past the window
	after := run(steady)
	t.Logf("alone (another model loaded, idle) %v, beside another model's batch %v, %v after it %v", alone, beside, faults.SharedWindow, after)
	// A sim batch is a timer: never shorter than its duration, sometimes
	// longer on a loaded host. So a doubled batch is >= 200 ms, and a batch
	// at its profile is judged only by not reaching that (the upper bounds
	// of 150 ms this test had failed under load).
	if alone >= 195*time.Millisecond || beside < 195*time.Millisecond || after >= 195*time.Millisecond {
		t.Errorf("shared=2: alone %v, beside another model %v, after it %v; want about 100ms, 200ms, 100ms", alone, beside, after)
	}
	if s, err := faults.Parse([]string{"shared=1.5"}); err != nil || s.Shared != 1.5 || s.String() != "shared=1.5" {
		t.Errorf("Parse(shared=1.5) = %+v (%q), %v", s, s.String(), err)
	}
	if err := inj.Set(faults.Set{Shared: 0.5}); err == nil || !strings.Contains(err.Error(), "shared 0.5") {
		t.Errorf("Set(shared 0.5) = %v; want an error naming it", err)
	}
}

// TestSlowLandsInReportedCompute: a backend run with --fault slow reports
// the slowed device time as the batch's Compute (the gateway learns its
// devices from it, docs/calibration.md, "Device time"), not as Queue, and a
// batch waiting behind a slowed one reports the wait as Queue.
func TestSlowLandsInReportedCompute(t *testing.T) {
	f := start(t)
	infer := func() backends.Timing {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, tm, err := f.client.InferTimed(ctx, "steady", oneItem())
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	base := infer()
	if !base.Reported() || base.Compute != 100*time.Millisecond {
		t.Fatalf("unslowed batch reported %+v; want Compute 100ms, the sim's emulated device time", base)
	}
	f.set(t, faults.Set{Slow: 1.6})
	slow := infer()
	if want := 160 * time.Millisecond; slow.Compute != want {
		t.Errorf("slow=1.6 batch reported %+v; want Compute %v (the profile's 100ms × 1.6)", slow, want)
	}
	var wg sync.WaitGroup
	tms := make([]backends.Timing, 2)
	for i := range tms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tms[i] = infer()
		}()
	}
	wg.Wait()
	queued := max(tms[0].Queue, tms[1].Queue)
	if tms[0].Compute != 160*time.Millisecond || tms[1].Compute != 160*time.Millisecond || queued < 120*time.Millisecond {
		t.Errorf("two slowed batches on one lane reported %+v and %+v; want Compute 160ms each and one queued about 160ms", tms[0], tms[1])
	}
}

// slowshare=P slows only a share P of the batches (a heavy-tailed service
// time), each drawn on its own: the others take their normal time. Read from
// the reported device time (1 ms, or 50 ms slowed), not the clock.
func TestSlowShareSlowsAShareOfBatches(t *testing.T) {
	f := start(t)
	f.set(t, faults.Set{Slow: 50, SlowShare: 0.3})
	const calls = 100
	slowed := 0
	for i := 0; i < calls; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, tm, err := f.client.InferTimed(ctx, "quick", oneItem())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		switch tm.Compute {
		case 50 * time.Millisecond:
			slowed++
		case time.Millisecond:
		default:
			t.Fatalf("batch reported Compute %v; want 1ms or, slowed, 50ms", tm.Compute)
		}
	}
	t.Logf("slow=50,slowshare=0.3: %d of %d batches slowed", slowed, calls)
	if share := float64(slowed) / calls; share < 0.15 || share > 0.45 {
		t.Errorf("slowshare=0.3 slowed %d of %d batches (%.2f); want about 0.3", slowed, calls, share)
	}
}
