package dataplane

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/faults"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/planner"
)

// faultConfig plans one module on two v100 machines (200 req/s against 133
// req/s a machine at batch 4).
var faultConfig = faultConfigAt(200, 1)

// faultConfigAt is faultConfig's module at rate req/s, raced on race
// machines (race: k; 1: not raced).
func faultConfigAt(rate float64, race int) string {
	return fmt.Sprintf(`
hardware:
  - {name: v100, price: 3}
profiles:
  - model: m
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 20ms}
      - {batch: 4, concurrency: 1, duration: 30ms}
sessions:
  - {name: s, slo: 300ms, modules: [{name: m, model: m, rate: %g, race: %d}]}
`, rate, race)
}

// faultRig is a LiveSwitch in the static mode (ReplaceOnEjection) over n sim
// backends, each behind a fault injector.
type faultRig struct {
	sw       *LiveSwitch
	inj      []*faults.Injector
	backends string // the backends list the switch's config was loaded with (YAML)
}

func (rig *faultRig) module() *liveModule { return rig.sw.Runner().sessions["s"]["m"] }

func startFaultRig(t *testing.T, n int, opts LiveOptions) *faultRig {
	t.Helper()
	return startRig(t, faultConfig, n, opts)
}

// startRig is startFaultRig for the config text cfgText (one session s of
// one module m, on v100 machines).
func startRig(t *testing.T, cfgText string, n int, opts LiveOptions) *faultRig {
	t.Helper()
	base, err := api.LoadBytes(api.NamedDoc{Name: "c.yaml", Data: []byte(cfgText)})
	if err != nil {
		t.Fatal(err)
	}
	rig := &faultRig{}
	var bl strings.Builder
	bl.WriteString("backends:\n")
	for i := range n {
		exec, err := sim.New("v100", base.Profiles, sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		inj, err := faults.New(faults.Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := backends.NewServer(inj.Executor(exec), backends.ServerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		srv.Serve()
		g := backends.NewGRPCServer(srv, inj.ServerOption())
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go g.Serve(inj.Listener(lis))
		t.Cleanup(g.Stop)
		rig.inj = append(rig.inj, inj)
		fmt.Fprintf(&bl, "  - {id: gpu-%d, address: %q, hardware: v100}\n", i, lis.Addr().String())
	}
	rig.backends = bl.String()
	rig.sw = newSwitch(t, cfgText, rig.backends, opts)
	t.Cleanup(func() { rig.sw.Close() })
	if got := len(rig.module().clients); got != 2 && cfgText == faultConfig {
		t.Fatalf("the plan uses %d backends; the test needs 2", got)
	}
	return rig
}

// measurement skips a test that measures figures for docs/faults.md (load
// runs of 10–20 s) unless PICCOLO_FAULT_MATRIX=1.
func measurement(t *testing.T) {
	if os.Getenv("PICCOLO_FAULT_MATRIX") != "1" {
		t.Skip("a measurement for docs/faults.md: PICCOLO_FAULT_MATRIX=1 runs it")
	}
}

// newFaultSwitch plans faultConfig over the backends listed in backendsYAML
// and serves it with a LiveSwitch in the static mode (ReplaceOnEjection).
func newFaultSwitch(t *testing.T, backendsYAML string, opts LiveOptions) *LiveSwitch {
	t.Helper()
	return newSwitch(t, faultConfig, backendsYAML, opts)
}

func newSwitch(t *testing.T, cfgText, backendsYAML string, opts LiveOptions) *LiveSwitch {
	t.Helper()
	cfg, plan := plannedConfig(t, cfgText, backendsYAML)
	sw, err := NewLiveSwitch(context.Background(), cfg, plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	sw.ReplaceOnEjection()
	return sw
}

// plannedConfig loads the config text cfgText with the backends list
// backendsYAML and plans it with the piccolo policy.
func plannedConfig(t *testing.T, cfgText, backendsYAML string) (*api.Config, *api.Plan) {
	t.Helper()
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "c.yaml", Data: []byte(cfgText)}, api.NamedDoc{Name: "b.yaml", Data: []byte(backendsYAML)})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planner.Plan(cfg, planner.Options{Policy: "piccolo"})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, plan
}

// loadResult counts the answers of an open-loop run.
type loadResult struct {
	sent, ok, failed, late, dup atomic.Int64
	errs                        sync.Map // error text -> count (first few)
}

// openLoop sends rate req/s to s/m for d, each with the session's 300 ms
// deadline, calling at(elapsed) between sends; it returns once every request
// has been answered (or fails the test after 5 s more).
func (rig *faultRig) openLoop(t *testing.T, rate float64, d time.Duration, at func(time.Duration)) *loadResult {
	t.Helper()
	res := &loadResult{}
	in := []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 1}, Data: make([]byte, 4)}}
	answers := make([]atomic.Int32, int(rate*d.Seconds())+16)
	var wg sync.WaitGroup
	start := time.Now()
	every := time.Duration(float64(time.Second) / rate)
	for i := 0; ; i++ {
		next := start.Add(time.Duration(i) * every)
		if el := next.Sub(start); el >= d || i >= len(answers) {
			break
		}
		time.Sleep(time.Until(next))
		if at != nil {
			at(time.Since(start))
		}
		res.sent.Add(1)
		wg.Add(1)
		id := i
		deadline := time.Now().Add(300 * time.Millisecond)
		rig.sw.Run(context.Background(), "s", "m", in, &gateway.Call{Deadline: deadline}, func(_ []api.Tensor, _ gateway.Timing, err error) {
			if answers[id].Add(1) > 1 {
				res.dup.Add(1)
				return
			}
			switch {
			case err != nil:
				res.failed.Add(1)
				if n, _ := res.errs.LoadOrStore(err.Error(), new(atomic.Int64)); n.(*atomic.Int64).Add(1) == 1 {
					t.Logf("request %d: %v", id, err)
				}
			case time.Now().After(deadline):
				res.late.Add(1)
			default:
				res.ok.Add(1)
			}
			wg.Done()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%d requests sent, %d answered after 5 s", res.sent.Load(), res.ok.Load()+res.failed.Load()+res.late.Load())
	}
	return res
}

func (r *loadResult) String() string {
	return fmt.Sprintf("sent %d: ok %d, late %d, failed %d, answered twice %d", r.sent.Load(), r.ok.Load(), r.late.Load(), r.failed.Load(), r.dup.Load())
}

// A backend that starts refusing connections mid-run leaves the table at its
// first failed call; its batches are retried on the other machine and its
// share re-placed on the spare (3 backends, a plan on 2), so no request fails
// and each is answered once; cleared, it is probed back in and serves again.
func TestRefusedBackendIsEjectedAndRetried(t *testing.T) {
	rig := startFaultRig(t, 3, LiveOptions{ProbeInterval: 200 * time.Millisecond})
	h := rig.sw.Health()
	var refused atomic.Bool
	res := rig.openLoop(t, 150, 3*time.Second, func(el time.Duration) {
		if el > time.Second && refused.CompareAndSwap(false, true) {
			if err := rig.inj[0].Set(faults.Set{Refuse: true}); err != nil {
				t.Error(err)
			}
		}
	})
	t.Log(res)
	var down BackendHealth
	for _, b := range h.Backends() {
		if b.ID == "gpu-0" {
			down = b
		}
	}
	t.Logf("gpu-0: %+v; stats %+v", down, h.Stats())
	if res.dup.Load() != 0 || res.failed.Load() > res.sent.Load()/1000 {
		t.Errorf("%v; want every request answered once, ≤ 0.1%% failed", res)
	}
	if down.Up || down.Ejections == 0 {
		t.Fatalf("gpu-0 %+v; want it ejected", down)
	}
	if down.LastEjection > 50*time.Millisecond {
		t.Errorf("gpu-0 left the table %v after its failed call; want ≤ 50 ms", down.LastEjection)
	}
	if _, ok := rig.module().clients["gpu-0"]; ok {
		t.Errorf("gpu-0 still in the plan after its ejection: %v", rig.sw.Plan().Sessions[0].Modules[0].Configs[0].Backends)
	}
	t.Logf("placed on %v while gpu-0 is down", rig.sw.Plan().Sessions[0].Modules[0].Configs[0].Backends)
	cleared := time.Now()
	if err := rig.inj[0].Clear(); err != nil {
		t.Fatal(err)
	}
	for len(h.Down()) > 0 {
		if time.Since(cleared) > 5*time.Second {
			t.Fatalf("gpu-0 still down 5 s after it was cleared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("gpu-0 back %v after refuse was cleared", time.Since(cleared).Round(time.Millisecond))
	deadline := time.Now().Add(5 * time.Second)
	for rig.module().clients["gpu-0"] == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the re-placement back onto gpu-0
	}
	t.Logf("gpu-0 placed again %v after refuse was cleared", time.Since(cleared).Round(time.Millisecond))
	lm := rig.module()
	before := lm.disp.Stats().Slots
	res = rig.openLoop(t, 150, time.Second, nil)
	after := lm.disp.Stats().Slots
	if res.failed.Load() != 0 || after[0].Slot.Backend != "gpu-0" || after[0].Batches == before[0].Batches {
		t.Errorf("after return: %v; slot 0 %s batches %d → %d; want none failed and gpu-0 serving", res, after[0].Slot.Backend, before[0].Batches, after[0].Batches)
	}
}

// A backend slowed 3× mid-run, side by side: one gateway hedges (budget
// 0.05), the other does not (budget 0); each over its own three backends at
// the same open-loop load. Hedging must not do worse, and its extra machine
// time stays within its budget's share.
func TestSlowBackendHedging(t *testing.T) {
	measurement(t)
	// With a spare, the straggler's machine is re-placed on it; without, only
	// down-weighting and hedging act.
	for _, n := range []int{3, 2} {
		t.Run(fmt.Sprintf("%d backends", n), func(t *testing.T) { slowBackendHedging(t, n) })
	}
}

func slowBackendHedging(t *testing.T, n int) {
	rigs := map[string]*faultRig{
		"hedge":    startFaultRig(t, n, LiveOptions{HedgeBudget: 0.05}),
		"no hedge": startFaultRig(t, n, LiveOptions{HedgeBudget: -1}),
	}
	results := map[string]*loadResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, rig := range rigs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var slowed atomic.Bool
			res := rig.openLoop(t, 150, 4*time.Second, func(el time.Duration) {
				if el > time.Second && slowed.CompareAndSwap(false, true) {
					if err := rig.inj[0].Set(faults.Set{Slow: 3}); err != nil {
						t.Error(err)
					}
				}
			})
			mu.Lock()
			results[name] = res
			mu.Unlock()
		}()
	}
	wg.Wait()
	for name, rig := range rigs {
		st := rig.sw.Health().Stats()
		var slow BackendHealth
		for _, b := range rig.sw.Health().Backends() {
			if b.ID == "gpu-0" {
				slow = b
			}
		}
		r := results[name]
		t.Logf("%s: %v; within SLO %.2f%%; batches %d, hedged %d (won %d), hedge machine time %v; gpu-0 slowness %.2f slow=%v",
			name, r, 100*float64(r.ok.Load())/float64(r.sent.Load()), st.Batches, st.HedgesWon+st.HedgesLost, st.HedgesWon,
			st.HedgeTime.Round(time.Millisecond), slow.Slowness, slow.Slow)
		if r.dup.Load() != 0 {
			t.Errorf("%s: %v; want each request answered once", name, r)
		}
		if !slow.Slow {
			t.Errorf("%s: gpu-0 at slow=3 not reported slow (EWMA %.2f)", name, slow.Slowness)
		}
		if h := st.HedgesWon + st.HedgesLost; float64(h) > 0.05*float64(st.Batches)+1 {
			t.Errorf("%s: %d hedges of %d batches; want ≤ 5%%", name, h, st.Batches)
		}
	}
	if h, n := results["hedge"].ok.Load(), results["no hedge"].ok.Load(); float64(h) < 0.98*float64(n) {
		t.Errorf("hedging: %d within SLO; without: %d", h, n)
	}
}

// TestFaultMatrix sets each fault of backends/faults on one of the plan's two
// backends (a third is the spare) one second into a 3 s open-loop run at 150
// req/s, and logs what the requests saw: the figures of docs/faults.md's
// fault matrix. Every request must be answered once, and at most 1% may fail
// (the matrix in the docs gives the measured share).
func TestFaultMatrix(t *testing.T) {
	measurement(t)
	for _, tc := range []struct {
		name string
		set  faults.Set
	}{
		{"refuse", faults.Set{Refuse: true}},
		{"reset", faults.Set{Reset: true}},
		{"hang", faults.Set{Hang: true}},
		{"slow=3", faults.Set{Slow: 3}},
		{"fail=0.1", faults.Set{Fail: 0.1}},
		{"malformed", faults.Set{Malformed: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rig := startFaultRig(t, 3, LiveOptions{ProbeInterval: 200 * time.Millisecond, Logger: zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))})
			var set atomic.Bool
			res := rig.openLoop(t, 150, 3*time.Second, func(el time.Duration) {
				if el > time.Second && set.CompareAndSwap(false, true) {
					if err := rig.inj[0].Set(tc.set); err != nil {
						t.Error(err)
					}
				}
			})
			st := rig.sw.Health().Stats()
			n := float64(res.sent.Load())
			t.Logf("| %s | %d | %d (%.2f%%) | %.2f%% | %d | %d (won %d) | %v | %+v |", tc.name, res.sent.Load(), res.failed.Load(),
				100*float64(res.failed.Load())/n, 100*float64(res.ok.Load())/n, st.Retries, st.HedgesWon+st.HedgesLost, st.HedgesWon,
				st.HedgeTime.Round(time.Millisecond), rig.sw.Health().Backends())
			if res.dup.Load() != 0 {
				t.Errorf("%v; want every request answered once", res)
			}
			if float64(res.failed.Load()) > 0.01*n {
				t.Errorf("%v; want ≤ 1%% failed", res)
			}
		})
	}
}
