// Package gatewaytest holds test helpers for the gateway's packages: a fake
// gateway.ModuleRunner, sessions from config text, and FP32/INT64/BYTES tensor data.
// It is imported by tests only.
package gatewaytest

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
	"github.com/piccolo-serving/piccolo/gateway"
	"go.yaml.in/yaml/v3"
)

// FakeRunner runs each module's function on a new goroutine after delay. A module
// without a function echoes its inputs. Modules in hang never answer (until ctx
// ends, then they answer with ctx.Err()).
type FakeRunner struct {
	Fn        map[string]func(in []api.Tensor) ([]api.Tensor, error)
	Delay     map[string]time.Duration
	Hang      map[string]bool
	Estimated atomic.Int64 // time.Duration
	Sync      bool         // call done on the caller's goroutine

	Mu       sync.Mutex
	Calls    map[string]int
	Order    []string
	Inflight atomic.Int32
}

var _ gateway.ModuleRunner = (*FakeRunner)(nil)

func NewFakeRunner() *FakeRunner {
	return &FakeRunner{Fn: map[string]func([]api.Tensor) ([]api.Tensor, error){}, Delay: map[string]time.Duration{},
		Hang: map[string]bool{}, Calls: map[string]int{}}
}

func (f *FakeRunner) Run(ctx context.Context, session, module string, in []api.Tensor, _ *gateway.Call, done func([]api.Tensor, gateway.Timing, error)) {
	f.Mu.Lock()
	f.Calls[module]++
	f.Order = append(f.Order, module)
	fn, delay, hang := f.Fn[module], f.Delay[module], f.Hang[module]
	f.Mu.Unlock()
	work := func() {
		if hang {
			<-ctx.Done()
			done(nil, gateway.Timing{}, ctx.Err())
			return
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		if fn == nil {
			done(in, gateway.Timing{Queue: time.Millisecond, Compute: 2 * time.Millisecond}, nil)
			return
		}
		out, err := fn(in)
		done(out, gateway.Timing{Queue: time.Millisecond, Compute: 2 * time.Millisecond}, err)
	}
	if f.Sync {
		work()
		return
	}
	f.Inflight.Add(1)
	go func() { defer f.Inflight.Add(-1); work() }()
}

func (f *FakeRunner) Estimate(session, module string) time.Duration {
	return time.Duration(f.Estimated.Load())
}

func (f *FakeRunner) CallsOf(module string) int {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.Calls[module]
}

// SessionsFromYAML reads sessions from config text, as an operator writes them.
func SessionsFromYAML(t testing.TB, text string) []api.Session {
	t.Helper()
	var cfg api.Config
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg.Sessions
}

func I64(vs ...int64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

func F32s(t api.Tensor) []float32 {
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}

// AddConst returns a module function that adds c to every FP32 element of every
// input and names the output name.
func AddConst(name string, c float32) func([]api.Tensor) ([]api.Tensor, error) {
	return func(in []api.Tensor) ([]api.Tensor, error) {
		var out []api.Tensor
		for _, t := range in {
			if t.Datatype != "FP32" {
				return nil, fmt.Errorf("want FP32, got %s", t.Datatype)
			}
			vs := F32s(t)
			for i := range vs {
				vs[i] += c
			}
			out = append(out, api.Tensor{Name: name, Datatype: "FP32", Shape: append([]int64(nil), t.Shape...), Data: FP32(vs...)})
		}
		return out, nil
	}
}

func ParamMap(ps []gateway.Param) map[string]float64 {
	m := make(map[string]float64, len(ps))
	for _, p := range ps {
		m[p.Key] = p.Value
	}
	return m
}

func OutputNames(ts []api.Tensor) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.Name
	}
	return strings.Join(s, ",")
}

func LE32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func FP32(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

func BytesElems(vs ...string) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

// Input is one FP32 input "x" of shape [1, len(vs)].
func Input(vs ...float32) []api.Tensor {
	return []api.Tensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, int64(len(vs))}, Data: FP32(vs...)}}
}

// EchoRunner answers every item at once, on the caller's goroutine, with its
// inputs: the gateway with nothing behind it.
type EchoRunner struct{}

func (EchoRunner) Run(_ context.Context, _, _ string, in []api.Tensor, _ *gateway.Call, done func([]api.Tensor, gateway.Timing, error)) {
	done(in, gateway.Timing{}, nil)
}
func (EchoRunner) Estimate(string, string) time.Duration { return 0 }
