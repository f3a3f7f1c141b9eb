// Package testharness holds what the gateway's integration tests share: the
// config fixture of a two-module chain, sim backends served over gRPC on free
// loopback ports (stopped in t.Cleanup), the OCR executor of `piccolo backend
// --executor ocr` (ocr.go), the planner the tests' gateways use,
// a JSON HTTP client and a load helper for benchmarks. Tests only. It imports
// nothing of the gateway's, so every package's tests may use it
// (kserve/kservetest serves a kserve.Server).
package testharness

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
)

// ChainProfiles is the config text of the integration tests: a chain of two
// modules on v100 sims. Durations are tens of milliseconds on purpose: the TC
// dispatcher flushes a partial batch d before its deadline and fails items whose
// deadline passed when the batch is sent, so a flush timer that fires more than d
// late (a loaded 2-core machine under -race) would fail requests.
const ChainProfiles = `
hardware:
  - {name: v100, price: 3}
profiles:
  - model: det
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 40ms}
      - {batch: 4, concurrency: 1, duration: 50ms}
      - {batch: 8, concurrency: 1, duration: 60ms}
  - model: rec
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 30ms}
      - {batch: 8, concurrency: 1, duration: 50ms}
sessions:
  - name: pipe
    slo: 1s
    modules:
      - {name: detect, model: det, rate: 50}
      - {name: recognize, model: rec, rate: 50, after: [detect]}
`

// StartSimBackends serves n v100 sim backends of profiles on loopback until the
// test ends and returns their config text: a `backends:` list (ids gpu-0...).
func StartSimBackends(t testing.TB, profiles []api.Profile, n int) string {
	t.Helper()
	var bl strings.Builder
	bl.WriteString("backends:\n")
	for i := range n {
		addr, _ := StartSimBackend(t, profiles)
		fmt.Fprintf(&bl, "  - {id: gpu-%d, address: %q, hardware: v100}\n", i, addr)
	}
	return bl.String()
}

// StartSimBackend serves one v100 sim backend over gRPC on a free loopback
// port until the test ends; it returns the address and the server (to stop it
// early).
func StartSimBackend(t testing.TB, profiles []api.Profile) (string, *grpc.Server) {
	t.Helper()
	ex, err := sim.New("v100", profiles, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ServeBackend(t, ex)
}

// ServeBackend serves a backends.Server over exec with gRPC on a free
// loopback port until the test ends; it returns the address and the server
// (to stop it early).
func ServeBackend(t testing.TB, exec backends.Executor) (string, *grpc.Server) {
	t.Helper()
	srv, err := backends.NewServer(exec, backends.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := backends.NewGRPCServer(srv)
	return ServeGRPC(t, g), g
}

// ServeGRPC serves g on a free loopback port until the test ends and
// returns the address.
func ServeGRPC(t testing.TB, g *grpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// HTTPDo sends one request and decodes the JSON answer; it fails the test
// when the answer is not JSON or not labelled application/json.
func HTTPDo(t testing.TB, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s %s: status %d, body is not JSON: %q", method, url, resp.StatusCode, b)
		}
	}
	if ct := resp.Header.Get("Content-Type"); len(b) > 0 && ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, url, ct)
	}
	return resp.StatusCode, m
}

// Planner plans cfg with the planner's piccolo policy, as the tests' gateways do.
func Planner(cfg *api.Config) (*api.Plan, error) {
	return planner.Plan(cfg, planner.Options{Policy: "piccolo"})
}

// ServeFast serves h with fasthttp on a free loopback port until the benchmark ends.
func ServeFast(b *testing.B, h fasthttp.RequestHandler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := &fasthttp.Server{Handler: h}
	go s.Serve(ln)
	b.Cleanup(func() { s.Shutdown() })
	return ln.Addr().String()
}

// Hammer sends n requests from conc connections and returns requests per second.
func Hammer(b *testing.B, addr, path string, body []byte, n, conc int) float64 {
	c := &fasthttp.HostClient{Addr: addr, MaxConns: conc}
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://" + addr + path)
			req.Header.SetMethod("POST")
			req.SetBody(body)
			for left.Add(-1) >= 0 {
				if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					b.Errorf("%s: %v status %d %s", path, err, resp.StatusCode(), resp.Body())
					return
				}
			}
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// InferBody is a KServe v2 JSON infer request of one FP32 input "x" of shape
// [1, 64], the request of the request-path benchmarks.
var InferBody = []byte(`{"id":"42","inputs":[{"name":"x","shape":[1,64],"datatype":"FP32","data":[` +
	strings.Repeat("0.25,", 63) + `1.5]}]}`)

// Slowed returns a copy of cfg whose every profile entry is k× slower: the
// profiles a calibration of devices all k× slower than profiled gives. cfg
// is not modified.
func Slowed(cfg *api.Config, k float64) *api.Config {
	out := *cfg
	out.Profiles = nil
	for _, p := range cfg.Profiles {
		p.Entries = append([]api.ProfileEntry(nil), p.Entries...)
		for i := range p.Entries {
			p.Entries[i].Duration = api.Duration(time.Duration(k * float64(p.Entries[i].Duration)))
		}
		out.Profiles = append(out.Profiles, p)
	}
	return &out
}

// Members returns n[hw] pool members of each hardware type hw, with ids
// "hw-i" (the order is not fixed: placement sorts them).
func Members(n map[string]int) []placement.Member {
	var out []placement.Member
	for hw, k := range n {
		for i := range k {
			out = append(out, placement.Member{ID: fmt.Sprintf("%s-%d", hw, i), Hardware: hw})
		}
	}
	return out
}
