package dataplane

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/faults"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/gateway"
)

// warmConfig plans one module on two v100 machines (30 req/s against 20
// req/s a machine at batch 4); a third listed backend is spare. Durations
// of 100 ms and more, so that a loaded test host's delays stay a small
// share of a ratio.
const warmConfig = `
hardware:
  - {name: v100, price: 3}
profiles:
  - model: m
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 100ms}
      - {batch: 4, concurrency: 1, duration: 200ms}
sessions:
  - {name: s, slo: 2s, modules: [{name: m, model: m, rate: 30}]}
`

// warmBackend is one sim backend of startWarmSwitch: its slow fault (0:
// none) and, to play a backend that rejects inputs, a wrapper of its server.
type warmBackend struct {
	slow float64
	wrap func(*backends.Server) inference.GRPCInferenceServiceServer
}

// startWarmSwitch serves warmConfig with a LiveSwitch over sim backends
// gpu-0, gpu-1, ... (faults set before the switch loads anything),
// calibration, admission and spares on, logging to an observer.
func startWarmSwitch(t *testing.T, specs []warmBackend, calibration bool) (*LiveSwitch, *observer.ObservedLogs) {
	t.Helper()
	base, err := api.LoadBytes(api.NamedDoc{Name: "c.yaml", Data: []byte(warmConfig)})
	if err != nil {
		t.Fatal(err)
	}
	var bl strings.Builder
	bl.WriteString("backends:\n")
	for i, spec := range specs {
		exec, err := sim.New("v100", base.Profiles, sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		inj, err := faults.New(faults.Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if spec.slow > 0 {
			if err := inj.Set(faults.Set{Slow: spec.slow}); err != nil {
				t.Fatal(err)
			}
		}
		srv, err := backends.NewServer(inj.Executor(exec), backends.ServerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		srv.Serve()
		addr, _ := serveGRPC(t, srv, spec.wrap)
		fmt.Fprintf(&bl, "  - {id: gpu-%d, address: %q, hardware: v100}\n", i, addr)
	}
	cfg, plan := plannedConfig(t, warmConfig, bl.String())
	core, logs := observer.New(zap.InfoLevel)
	opts := LiveOptions{Admission: true, Spare: true, ProbeInterval: -1, HedgeBudget: -1, Logger: zap.New(core)}
	if calibration {
		if opts.Calibration, err = calibrate.New(calibrate.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	sw, err := NewLiveSwitch(context.Background(), cfg, plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	return sw, logs
}

// wantPaces checks each backend's pace against its range [min, max].
func wantPaces(t *testing.T, sw *LiveSwitch, when string, want map[string][2]float64) {
	t.Helper()
	for id, r := range want {
		if p := sw.Health().entry(id).Pace(); p < r[0] || p > r[1] {
			t.Errorf("%s, %s: pace %.2f; want %.2f–%.2f (its warm-up)", id, when, p, r[0], r[1])
		}
	}
}

// The gateway measures every backend's pace with a warm-up batch before it
// takes traffic, spares included: a device 1.6× slower than its profile is
// expected so before any request, and the first full batch goes to the
// machine that runs it as planned (without the warm-up both paces read 1
// and the first batch goes to the slow machine, the first listed).
func TestWarmUpMeasuresPaceBeforeTraffic(t *testing.T) {
	sw, logs := startWarmSwitch(t, []warmBackend{{slow: 1.6}, {}, {slow: 1.3}}, true)
	lm := sw.Runner().sessions["s"]["m"]
	var planned []string
	for _, s := range lm.disp.Stats().Slots {
		planned = append(planned, s.Slot.Backend)
	}
	if strings.Join(planned, ",") != "gpu-0,gpu-1" {
		t.Fatalf("the plan's machines are %v; the test needs gpu-0 and gpu-1 (gpu-2 spare)", planned)
	}
	wantPaces(t, sw, "before any request", map[string][2]float64{"gpu-0": {1.5, 1.9}, "gpu-1": {0.95, 1.25}, "gpu-2": {1.25, 1.55}})
	if n := logs.FilterMessageSnippet("pace measured by warm-up").Len(); n != 1 {
		t.Errorf("%d info lines for the warm-up; want 1", n)
	}

	// One full batch (4 items at once): the machine as fast as planned takes it.
	in := []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 1}, Data: make([]byte, 4)}}
	done := make(chan error, 4)
	start := time.Now()
	for range 4 {
		call := &gateway.Call{Deadline: start.Add(2 * time.Second)}
		sw.Run(context.Background(), "s", "m", in, call, func(_ []api.Tensor, _ gateway.Timing, err error) { done <- err })
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range lm.disp.Stats().Slots {
		if s.Slot.Backend == "gpu-0" && s.Batches > 0 {
			t.Errorf("the first full batch went to gpu-0, measured 1.6× slower, while gpu-1 was free")
		}
	}
}

// Calibration off: no pace, so no warm-up batch either.
func TestWarmUpOnlyWithCalibration(t *testing.T) {
	sw, logs := startWarmSwitch(t, []warmBackend{{slow: 1.6}, {}}, false)
	if p := sw.Health().entry("gpu-0").Pace(); p != 1 {
		t.Errorf("calibration off: gpu-0's pace %.2f; want 1 (none)", p)
	}
	if n := logs.FilterMessageSnippet("warm-up").Len(); n != 0 {
		t.Errorf("calibration off: %d warm-up log lines; want none", n)
	}
}

// rejectsInfer is a backend that loads models but rejects every batch as
// invalid (an executor whose dummy inputs are not valid data).
type rejectsInfer struct{ *backends.Server }

func (rejectsInfer) ModelInfer(context.Context, *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	return nil, status.Error(codes.InvalidArgument, "not an image")
}

// A warm-up that fails does not fail the load: the backend takes the
// measured backends' pace (the prior), and the failure is logged once per
// model, not at every plan applied.
func TestWarmUpFailureIsLoggedOnceAndLoses(t *testing.T) {
	reject := func(s *backends.Server) inference.GRPCInferenceServiceServer { return rejectsInfer{s} }
	sw, logs := startWarmSwitch(t, []warmBackend{{slow: 1.3}, {wrap: reject}, {wrap: reject}}, true)
	if p := sw.Health().entry("gpu-1").Pace(); p < 1.2 || p > 1.5 {
		t.Errorf("gpu-1, its warm-up rejected: pace %.2f; want gpu-0's 1.3 (the prior)", p)
	}
	warned := logs.FilterMessageSnippet("warm-up batch failed")
	if warned.Len() != 1 {
		t.Fatalf("%d warnings for the failed warm-ups; want 1 (one model)", warned.Len())
	}
	if got := fmt.Sprint(warned.All()[0].ContextMap()["backends"]); got != "[gpu-1 gpu-2]" {
		t.Errorf("the warning names backends %s; want [gpu-1 gpu-2]", got)
	}
	// A plan applied again warms up nothing new and logs nothing more.
	if err := sw.Apply(context.Background(), sw.Config(), sw.Plan()); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessageSnippet("warm-up batch failed").Len(); n != 1 {
		t.Errorf("after a second Apply: %d warnings; want still 1", n)
	}
}

// oneCore plays backends that share one host core: a batch runs only while
// no other backend of the host runs one.
type oneCore struct {
	*backends.Server
	core *sync.Mutex
}

func (b oneCore) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	b.core.Lock()
	defer b.core.Unlock()
	return b.Server.ModelInfer(ctx, req)
}

// Backends that share a host's cores slow each other in the first round,
// which runs on every backend at once: a round that looks slow counts only
// once measured again alone on the host, so three backends as fast as
// profiled are not taken for 2–3× slower, and a slow one among them still
// is.
func TestWarmUpRechecksAloneOnTheHost(t *testing.T) {
	var core sync.Mutex
	shared := func(s *backends.Server) inference.GRPCInferenceServiceServer { return oneCore{s, &core} }
	sw, logs := startWarmSwitch(t, []warmBackend{{wrap: shared}, {wrap: shared}, {slow: 1.6, wrap: shared}}, true)
	wantPaces(t, sw, "one core shared by three", map[string][2]float64{"gpu-0": {0.95, 1.25}, "gpu-1": {0.95, 1.25}, "gpu-2": {1.5, 1.9}})
	if n := logs.FilterMessageSnippet("pace measured by warm-up").Len(); n != 1 {
		t.Errorf("%d info lines for the warm-up; want 1", n)
	}
}

// A plan change warms up no backend the running plan sends batches to,
// spares included, even one with no pace of its own (a first round not
// confirmed alone): a warm-up batch there would delay its traffic and the
// new plan.
func TestWarmUpSkipsBackendsInUse(t *testing.T) {
	sw, logs := startWarmSwitch(t, []warmBackend{{}, {}, {}}, true)
	for _, id := range []string{"gpu-0", "gpu-2"} { // a planned machine and the spare
		bh := sw.Health().entry(id)
		bh.paceRatio.Store(0)
		sw.Health().unpaced.Add(1)
	}
	if err := sw.Apply(context.Background(), sw.Config(), sw.Plan()); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessageSnippet("pace measured by warm-up").Len(); n != 1 {
		t.Errorf("after a plan change over the same backends: %d warm-up info lines; want 1 (the start's)", n)
	}
}
