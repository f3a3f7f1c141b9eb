package controlplane

import (
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// BenchmarkModuleArrived is the rate counters' cost per module start on the
// request path (the DAGRunner calls ModuleArrived once each time a module
// with parents starts): a module of a chain (one item) and a fan-out (its
// items, and its parent item counted by them), from one goroutine and from
// one per core (every call on the same counters: the worst case of their
// cache lines moving between cores).
func BenchmarkModuleArrived(b *testing.B) {
	a, err := newArrivals(time.Now(), replan.MonitorOptions{})
	if err != nil {
		b.Fatal(err)
	}
	a.track(sessionConfig(time.Second,
		api.Module{Name: "src", Rate: 100},
		api.Module{Name: "next", Rate: 100, After: []string{"src"}},
		api.Module{Name: "fan", Rate: 300, After: []string{"src"}}))
	for _, bc := range []struct{ name, module string }{{"chain", "next"}, {"fan-out", "fan"}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a.ModuleArrived("s", bc.module, 3)
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					a.ModuleArrived("s", bc.module, 3)
				}
			})
		})
	}
}
