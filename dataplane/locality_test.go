package dataplane

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/planner"
)

// localityProfiles: a chain whose first module (mk) makes a 256 KiB
// intermediate (its sim rows are widened, localityWidth) that the second
// (use) reads; one hardware type, so both modules may share a backend.
const localityProfiles = `
hardware:
  - {name: v100, price: 1}
profiles:
  - model: mk
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 4ms}
      - {batch: 4, concurrency: 1, duration: 8ms}
  - model: use
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 4ms}
      - {batch: 4, concurrency: 1, duration: 8ms}
sessions:
  - name: chain
    slo: 400ms
    modules:
      - {name: make, model: mk, rate: 20}
      - {name: read, model: use, rate: 20, after: [make]}
`

const localityWidth = 65536 // FP32 values a row: 256 KiB

// TestLocalityNamesHeldIntermediates runs the chain through a LiveRunner on
// two sim backends that hold outputs, with and without locality: with it,
// every batch of read goes to the backend that made its intermediate and
// none of the intermediate's bytes are sent to it again; without it, all
// are. The answers are the same either way (each item's output is the
// checksum of its own intermediate).
func TestLocalityNamesHeldIntermediates(t *testing.T) {
	var yaml strings.Builder
	yaml.WriteString("backends:\n")
	base := mustLoad(t, localityProfiles)
	regs := make([]*prometheus.Registry, 2)
	for i := range regs {
		exec, err := sim.New("v100", base.Profiles, sim.Options{OutputWidth: map[string]int{"mk": localityWidth}})
		if err != nil {
			t.Fatal(err)
		}
		regs[i] = prometheus.NewRegistry()
		bm, err := backends.NewMetrics(regs[i])
		if err != nil {
			t.Fatal(err)
		}
		srv, err := backends.NewServer(exec, backends.ServerOptions{Metrics: bm, HoldBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		addr := testharness.ServeGRPC(t, backends.NewGRPCServer(srv))
		fmt.Fprintf(&yaml, "  - {id: gpu-%d, address: %q, hardware: v100}\n", i, addr)
	}
	cfg := mustLoad(t, localityProfiles+yaml.String())
	plan, err := planner.Plan(cfg, planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 24
	sent := map[bool]float64{}
	for _, local := range []bool{false, true} {
		before := receivedBytes(t, regs, "use")
		var opts LiveOptions
		if local {
			opts.Locality = 1024
		}
		runner, err := NewLiveRunner(context.Background(), cfg, plan, opts)
		if err != nil {
			t.Fatal(err)
		}
		exec, err := gateway.NewDAGRunner(runner, cfg.Sessions)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := api.Tensor{Name: "input0", Datatype: "FP32", Shape: []int64{1, 2}, Data: fp32le(float32(i), float32(local01(local)))}
				var resp gateway.InferResponse
				if errs[i] = exec.Infer(context.Background(), "chain", &gateway.InferRequest{Inputs: []api.Tensor{in}}, &resp); errs[i] != nil {
					return
				}
				mid := sim.Checksum(in.Data)
				row := make([]byte, 4*localityWidth)
				for j := 0; j < len(row); j += 4 {
					binary.LittleEndian.PutUint32(row[j:], math.Float32bits(mid))
				}
				want := sim.Checksum(row)
				if got := math.Float32frombits(binary.LittleEndian.Uint32(resp.Outputs[0].Data)); got != want {
					errs[i] = fmt.Errorf("request %d: output %v; want %v, the checksum of its own intermediate", i, got, want)
				}
			}()
		}
		wg.Wait()
		runner.Close()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("locality %v: %v", local, err)
			}
		}
		sent[local] = receivedBytes(t, regs, "use") - before
		t.Logf("locality %v: %.0f bytes sent to read's backends for %d requests", local, sent[local], n)
	}
	if want := float64(n * 4 * localityWidth); sent[false] < want {
		t.Fatalf("without locality read's backends received %.0f bytes; want every intermediate, %.0f", sent[false], want)
	}
	if sent[true] != 0 {
		t.Fatalf("with locality read's backends received %.0f bytes of intermediates they hold; want 0", sent[true])
	}
}

func local01(b bool) int {
	if b {
		return 1
	}
	return 0
}

// receivedBytes sums piccolo_backend_received_bytes_total{model} over regs.
func receivedBytes(t *testing.T, regs []*prometheus.Registry, model string) float64 {
	t.Helper()
	return counterSum(t, regs, "piccolo_backend_received_bytes_total", "model", model)
}

func fp32le(xs ...float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
