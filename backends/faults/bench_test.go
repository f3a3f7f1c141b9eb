package faults_test

import (
	"context"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/faults"
)

// echo is a model that answers its inputs at once: the benchmarks measure the
// wrapper, not a model.
type echo struct{}

func (echo) Info() backends.ModelInfo {
	return backends.ModelInfo{Name: "echo", MaxBatch: 8, Concurrency: 1}
}
func (echo) Close() error { return nil }
func (echo) Run(_ context.Context, in []api.Tensor, _ int) ([]api.Tensor, error) {
	return in, nil
}

type echoExec struct{}

func (echoExec) Models() []string { return []string{"echo"} }
func (echoExec) Load(string, int, int) (backends.Model, error) {
	return echo{}, nil
}

// BenchmarkRunNoFault compares a bare model's Run with the same model wrapped
// by an Injector with no fault active: the difference is the no-fault cost
// (one atomic load, no allocation).
func BenchmarkRunNoFault(b *testing.B) {
	inj, err := faults.New(faults.Options{})
	if err != nil {
		b.Fatal(err)
	}
	wrapped, err := inj.Executor(echoExec{}).Load("echo", 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	in := []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 1}, Data: make([]byte, 4)}}
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		m    backends.Model
	}{{"bare", echo{}}, {"wrapped", wrapped}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.m.Run(ctx, in, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
