package loadgen

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkHTTPInfer measures one HTTP request through httpTransport.infer against
// a loopback fasthttp server that answers without decoding. Allocations are the
// sender's plus the server's few.
func BenchmarkHTTPInfer(b *testing.B) {
	ts := startServer(b, &testServer{lean: true})
	h, err := newHTTPTransport(ts.URL, "s", 5*time.Second, 64)
	if err != nil {
		b.Fatal(err)
	}
	p, _ := ParseRequest([]byte(`{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var id uint64
		for pb.Next() {
			id++
			if k := h.infer(context.Background(), id, &p); k != kindOK {
				b.Errorf("outcome %v", k)
				return
			}
		}
	})
}

type nopTransport struct{}

func (nopTransport) metadata(context.Context) (modelMetadata, error) { return modelMetadata{}, nil }
func (nopTransport) infer(context.Context, uint64, *Payload) kind    { return kindOK }
func (nopTransport) close()                                          {}

// BenchmarkScheduleDispatch measures the scheduler's cost per request (release,
// goroutine, result slot) with a transport that answers at once: the ceiling of
// the send rate one scheduler goroutine sustains.
func BenchmarkScheduleDispatch(b *testing.B) {
	o := Options{Arrival: "constant", Rate: 1e9, CV2: 1, Seed: 1, MaxInflight: 1 << 30}
	r := &run{t: nopTransport{}, payloads: []Payload{{}}, ctx: context.Background(), results: make([]atomic.Uint64, b.N)}
	b.ReportAllocs()
	b.ResetTimer()
	r.schedule(o, time.Now(), b.N)
	r.wg.Wait()
}
