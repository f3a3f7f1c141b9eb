package gateway

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"gopkg.in/yaml.v3"
)

// fakeRunner runs each module's function on a new goroutine after delay. A module
// without a function echoes its inputs. Modules in hang never answer (until ctx
// ends, then they answer with ctx.Err()).
type fakeRunner struct {
	fn       map[string]func(in []api.Tensor) ([]api.Tensor, error)
	delay    map[string]time.Duration
	hang     map[string]bool
	estimate atomic.Int64 // time.Duration
	sync     bool         // call done on the caller's goroutine

	mu       sync.Mutex
	calls    map[string]int
	order    []string
	inflight atomic.Int32
}

var _ ModuleRunner = (*fakeRunner)(nil)

func newFakeRunner() *fakeRunner {
	return &fakeRunner{fn: map[string]func([]api.Tensor) ([]api.Tensor, error){}, delay: map[string]time.Duration{},
		hang: map[string]bool{}, calls: map[string]int{}}
}

func (f *fakeRunner) Run(ctx context.Context, session, module string, in []api.Tensor, deadline time.Time, done func([]api.Tensor, Timing, error)) {
	f.mu.Lock()
	f.calls[module]++
	f.order = append(f.order, module)
	fn, delay, hang := f.fn[module], f.delay[module], f.hang[module]
	f.mu.Unlock()
	work := func() {
		if hang {
			<-ctx.Done()
			done(nil, Timing{}, ctx.Err())
			return
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		if fn == nil {
			done(in, Timing{Queue: time.Millisecond, Compute: 2 * time.Millisecond}, nil)
			return
		}
		out, err := fn(in)
		done(out, Timing{Queue: time.Millisecond, Compute: 2 * time.Millisecond}, err)
	}
	if f.sync {
		work()
		return
	}
	f.inflight.Add(1)
	go func() { defer f.inflight.Add(-1); work() }()
}

func (f *fakeRunner) Estimate(session, module string) time.Duration {
	return time.Duration(f.estimate.Load())
}

func (f *fakeRunner) callsOf(module string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[module]
}

// sessionsFromYAML reads sessions from config text, as an operator writes them.
func sessionsFromYAML(t testing.TB, text string) []api.Session {
	t.Helper()
	var cfg api.Config
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg.Sessions
}

func i64(vs ...int64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

func f32s(t api.Tensor) []float32 {
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}

// addConst returns a module function that adds c to every FP32 element of every
// input and names the output name.
func addConst(name string, c float32) func([]api.Tensor) ([]api.Tensor, error) {
	return func(in []api.Tensor) ([]api.Tensor, error) {
		var out []api.Tensor
		for _, t := range in {
			if t.Datatype != "FP32" {
				return nil, fmt.Errorf("want FP32, got %s", t.Datatype)
			}
			vs := f32s(t)
			for i := range vs {
				vs[i] += c
			}
			out = append(out, api.Tensor{Name: name, Datatype: "FP32", Shape: append([]int64(nil), t.Shape...), Data: fp32(vs...)})
		}
		return out, nil
	}
}

func paramMap(ps []Param) map[string]float64 {
	m := make(map[string]float64, len(ps))
	for _, p := range ps {
		m[p.Key] = p.Value
	}
	return m
}

func outputNames(ts []api.Tensor) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.Name
	}
	return strings.Join(s, ",")
}
