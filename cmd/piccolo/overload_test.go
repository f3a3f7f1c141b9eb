package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/piccolo-serving/piccolo/loadgen"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// overloadProfile is issue 11's overload case (simulate/testdata/overload.yaml:
// b1 2 ms, b4 3 ms, b16 8 ms, SLO 100 ms, planned at 1500 req/s) scaled 10×
// in time: b1 20 ms, b4 30 ms, b16 80 ms, SLO 1 s, planned at 150 req/s, one
// machine of 200 req/s. The shape is the same; the rates are a tenth, so that
// 10× the planned rate (1500 req/s) is what one loaded 2-core machine can
// drive through a gateway and a backend, in-process with the load generator
// (docs/dataplane.md, "Overload, live").
const overloadProfile = `
hardware:
  - {name: v100, price: 1}
profiles:
  - model: m
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 20ms}
      - {batch: 4, concurrency: 1, duration: 30ms}
      - {batch: 16, concurrency: 1, duration: 80ms}
sessions:
  - name: one
    slo: 1000ms
    modules:
      - {name: m, model: m, rate: 150}
`

// startPool starts n sim backends (hardware v100) on configText and a
// `piccolo gateway` (flush idle, --admission, spare, the static control loop
// re-planning on the measured rate as it does by default) over a static
// backends list naming all n, planned at --max-utilization 0.8 so the plan is
// the same at every n; edit, when not nil, changes its options (onePlan holds
// the rate re-plan off). It returns the gateway's URL; everything stops when
// ctx ends.
//
// On a pool of one backend the rate re-plan at 2× wants 1.65 machines, at 4×
// 3.9, and places them all on that backend: the dispatcher counts their
// batches on the backend's device and sends no more at once than it has
// lanes (dispatcher.Device), so what it admits stays what the one backend
// serves in time (docs/dataplane.md, "Admission").
func startPool(t testing.TB, ctx context.Context, configText string, n int, edit func(*gatewayOptions)) string {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfgPath, []byte(configText), 0o644); err != nil {
		t.Fatal(err)
	}
	list := "backends:\n"
	for i := range n {
		addr, _ := startBackend(t, ctx, &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath},
			executor: "sim", logFmt: "json", drain: time.Second})
		list += fmt.Sprintf("  - {id: gpu-%d, address: %q, hardware: v100}\n", i, addr)
	}
	bePath := filepath.Join(dir, "backends.yaml")
	if err := os.WriteFile(bePath, []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	o := &gatewayOptions{files: []string{cfgPath, bePath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", policy: "piccolo",
		maxUtil: 0.8, dispatch: "tc", flush: "idle", maxBody: 1 << 20, slack: 0.1, admission: true, spare: true,
		logFmt: "json", drain: time.Second}
	if edit != nil {
		edit(o)
	}
	url, _ := startGateway(t, ctx, o)
	return url
}

// onePlan holds the static control loop's rate re-plan off, for a test whose
// premise is one plan (a spare the plan leaves idle; a machine kept busy).
func onePlan(o *gatewayOptions) { o.loop = replan.Options{SustainUp: time.Hour} }

// openLoop is what an overload run measured (piccolo loadgen -o json).
type openLoop struct {
	Sent          int64            `json:"sent"`
	OK            int64            `json:"ok"`
	Errors        map[string]int64 `json:"errors"`
	SLOAttainment float64          `json:"slo_attainment"`
	Throughput    float64          `json:"throughput_rps"`
	P99Ms         float64          `json:"p99_ms"`
	MaxMs         float64          `json:"max_ms"`
	LateSends     int64            `json:"late_sends"`
	Seconds       []loadgen.Second `json:"seconds"` // with --per-second
}

// misses lists the seconds of the run with a request not answered within
// the SLO: "t=12s: 41 sent, 3 late, 1 refused".
func (r openLoop) misses() string {
	var b strings.Builder
	for k, s := range r.Seconds {
		if s.Within < s.Sent {
			fmt.Fprintf(&b, "t=%ds: %d sent, %d late, %d refused, %d failed; ", k, s.Sent, s.Late, s.Refused, s.Failed)
		}
	}
	return b.String()
}

// refused is the share of sent requests answered 429.
func (r openLoop) refused() float64 {
	return float64(r.Errors["rejected: overloaded"]) / float64(r.Sent)
}

// admittedWithin is the share of admitted requests (sent, neither refused nor
// dropped by the load generator) answered OK within the SLO.
func (r openLoop) admittedWithin() float64 {
	admitted := r.Sent - r.Errors["rejected: overloaded"] - r.Errors["dropped: client overload"]
	if admitted <= 0 {
		return 1
	}
	return r.SLOAttainment * float64(r.Sent) / float64(admitted)
}

func (r openLoop) String() string {
	return fmt.Sprintf("sent %d ok %d refused %.1f%% admitted within SLO %.3f%% errors %v goodput %.0f/s p99 %.0f ms max %.0f ms late sends %d",
		r.Sent, r.OK, 100*r.refused(), 100*r.admittedWithin(), r.Errors, r.Throughput, r.P99Ms, r.MaxMs, r.LateSends)
}

// loadOpen runs `piccolo loadgen` open loop (Poisson, seed 1) at rate for d
// against session one at url.
func loadOpen(t *testing.T, url string, rate float64, d time.Duration) openLoop {
	t.Helper()
	out, err := runLoadgen(t, "--target", url, "--session", "one", "--rate", strconv.FormatFloat(rate, 'f', -1, 64),
		"--duration", d.String(), "--drain", "3s", "--seed", "1", "-o", "json", "-q")
	if err != nil {
		t.Fatalf("loadgen: %v\n%s", err, out)
	}
	var r openLoop
	if err := jsonFrom(out, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// jsonFrom decodes the JSON report in loadgen's output into v.
func jsonFrom(out string, v any) error {
	i := strings.Index(out, "{")
	if i < 0 {
		return fmt.Errorf("loadgen output has no JSON report:\n%s", out)
	}
	if err := json.Unmarshal([]byte(out[i:]), v); err != nil {
		return fmt.Errorf("loadgen output: %v\n%s", err, out)
	}
	return nil
}

// overflowBatches reads piccolo_dispatcher_overflow_batches_total of
// session one, module m, from the gateway's /metrics.
func overflowBatches(t *testing.T, url string) float64 {
	t.Helper()
	re := regexp.MustCompile(metrics.DispatcherOverflowBatchesTotal + `\{module="m",session="one"\} (\S+)`)
	m := re.FindStringSubmatch(getMetrics(t, url+"/metrics"))
	if m == nil {
		t.Fatalf("/metrics has no %s for one/m", metrics.DispatcherOverflowBatchesTotal)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestSpareOverflowLive: issue 11's spare capacity before refusal, live. The
// overload plan (one machine) on a pool of 1 backend, then of 2 (the second
// left idle by the plan: a spare), open loop at 2× the planned rate. With
// the spare, refusals fall far below the run without (at most a tenth),
// ≥ 99.9% of the admitted finish within the SLO, none fails late (504), and
// the overflow counter is > 0.
func TestSpareOverflowLive(t *testing.T) {
	if testing.Short() {
		t.Skip("a live overload run")
	}
	run := func(n int) (openLoop, float64) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		url := startPool(t, ctx, overloadProfile, n, onePlan) // a re-plan would take the spare into the plan
		r := loadOpen(t, url, 300, 3*time.Second)
		return r, overflowBatches(t, url)
	}
	alone, aloneOver := run(1)
	t.Logf("1 backend:            %v; overflow batches %.0f", alone, aloneOver)
	spare, over := run(2)
	t.Logf("1 backend + 1 spare:  %v; overflow batches %.0f", spare, over)
	if alone.refused() < 0.1 {
		t.Fatalf("without a spare only %.1f%% were refused at 2×: the run did not overload the plan", 100*alone.refused())
	}
	if spare.refused() > alone.refused()/10 {
		t.Errorf("with a spare %.1f%% refused, without %.1f%%: want at most a tenth", 100*spare.refused(), 100*alone.refused())
	}
	if spare.admittedWithin() < 0.999 || spare.Errors["deadline"] > 0 {
		t.Errorf("with a spare: %.3f%% of the admitted within the SLO and %d late (504); want ≥ 99.9%% and 0",
			100*spare.admittedWithin(), spare.Errors["deadline"])
	}
	if over <= 0 || aloneOver != 0 {
		t.Errorf("overflow batches %.0f with a spare, %.0f without; want > 0 and 0", over, aloneOver)
	}
}

// TestOverloadLive: issue 11's overload, live. The overload plan on one
// backend, open loop at 2× and 4× the planned rate for 3 s each through a
// real gateway (admission on, and the rate re-plan, which stacks the
// machines it adds on the one backend): no admitted request fails late (zero 504),
// ≥ 99.9% of the admitted finish within the SLO, and the gateway's heap after
// the runs is within 16 MiB of before (the queue stays bounded by the SLO).
// The 10 s figures at 2×, 4× and 10× are in docs/dataplane.md.
func TestOverloadLive(t *testing.T) {
	if testing.Short() {
		t.Skip("a live overload run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := startPool(t, ctx, overloadProfile, 1, nil)
	heap := func() uint64 {
		goruntime.GC()
		var ms goruntime.MemStats
		goruntime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	loadOpen(t, url, 150, time.Second) // warm up: connections, pools
	before := heap()
	for _, k := range []float64{2, 4} {
		overloadRun(t, url, k)
	}
	after := heap()
	t.Logf("heap in use (test process: gateway, backend, load generator) %.1f MiB before, %.1f MiB after", float64(before)/(1<<20), float64(after)/(1<<20))
	if after > before+16<<20 {
		t.Errorf("heap grew from %d to %d bytes over the overload runs: want within 16 MiB", before, after)
	}
}

// overloadRun runs the open loop at k× the overload plan's 150 req/s for 3 s
// against url and checks what admission promises: no admitted request late
// (504), ≥ 99.9% of the admitted within the SLO, and some refused (the run
// overloads the plan).
func overloadRun(t *testing.T, url string, k float64) {
	t.Helper()
	r := loadOpen(t, url, 150*k, 3*time.Second)
	t.Logf("%.0f×: %v", k, r)
	if r.Errors["deadline"] > 0 || r.admittedWithin() < 0.999 {
		t.Errorf("%.0f×: %d late (504), %.3f%% of the admitted within the SLO; want 0 and ≥ 99.9%%", k, r.Errors["deadline"], 100*r.admittedWithin())
	}
	if r.refused() == 0 {
		t.Errorf("%.0f×: nothing refused: the run did not overload the plan", k)
	}
}

// TestReplanInOverloadLive: a re-plan in the middle of an overload does not
// make admitted requests late. The overload plan on one backend, open loop
// at 2× and 4× the planned rate for 3 s each, and every 400 ms a new plan
// made live (the session PUT through the admin API at 150 and 151 req/s in
// turn: one machine each time, a new runner each time): the old runner's
// queued items move to the new one's dispatcher, whose admission counts
// them. Zero 504, ≥ 99.9% of the admitted within the SLO, and refusals (the
// run overloads). Without the handover, two such runs answered 149 and 221
// requests 504 at 2× (of 931), 411 and 359 at 4× (of 1840).
func TestReplanInOverloadLive(t *testing.T) {
	if testing.Short() {
		t.Skip("a live overload run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := startPool(t, ctx, overloadProfile, 1, func(o *gatewayOptions) { onePlan(o); o.adminToken = "tok" })
	loadOpen(t, url, 150, time.Second)
	var replans, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(400 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			body := fmt.Sprintf("name: one\nslo: 1000ms\nmodules:\n  - {name: m, model: m, rate: %d}\n", 150+i%2)
			req, _ := http.NewRequest("PUT", url+"/admin/sessions/one", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer tok")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				failed.Add(1)
				continue
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				failed.Add(1)
				continue
			}
			replans.Add(1)
		}
	}()
	for _, k := range []float64{2, 4} {
		overloadRun(t, url, k)
	}
	close(stop)
	wg.Wait()
	t.Logf("plans made live during the runs: %d (%d PUTs failed)", replans.Load(), failed.Load())
	if replans.Load() < 8 || failed.Load() > 0 {
		t.Errorf("%d re-plans made live, %d PUTs failed: want at least 8 (one each 400 ms over 2 runs of 3 s) and none failed", replans.Load(), failed.Load())
	}
}

// firstProfile is issue 11's fresh gateway case: one module, SLO 50 ms,
// planned at 150k req/s (the plan has hundreds of machines, all placed on the
// one backend), with batches of 5–10 ms so that loopback noise is small
// against the compute time.
const firstProfile = `
hardware:
  - {name: v100, price: 1}
profiles:
  - model: m
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 5ms}
      - {batch: 4, concurrency: 1, duration: 6ms}
      - {batch: 16, concurrency: 1, duration: 10ms}
sessions:
  - name: one
    slo: 50ms
    modules:
      - {name: m, model: m, rate: 150000}
`

// TestFreshGatewayFirstRequests: a fresh gateway (nothing measured yet,
// machines idle) answers its first request, and 8 concurrent first requests,
// well before the deadline flush (~45 ms of the 50 ms SLO, which is what the
// first requests waited before issue 11): within firstBound, half way there.
// Their compute is 5 ms alone, at most 10 ms for 8; the bound leaves the
// rest for a loaded 2-core host (twice the compute failed 2 of 3 gateways at
// load 10) while a hold until the flush still fails it. Each case has a
// gateway of its own.
const firstBound = 25 * time.Millisecond

func TestFreshGatewayFirstRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("a live run")
	}
	body := []byte(`{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`)
	post := func(c *fasthttp.Client, url string) (time.Duration, int) {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI(url + "/v2/models/one/infer")
		req.Header.SetMethod("POST")
		req.SetBody(body)
		t0 := time.Now()
		if err := c.DoTimeout(req, resp, 5*time.Second); err != nil {
			t.Errorf("request: %v", err)
			return 0, 0
		}
		return time.Since(t0), resp.StatusCode()
	}
	for _, tc := range []struct {
		n       int
		compute time.Duration // of the batch the last of them runs in
	}{{1, 5 * time.Millisecond}, {8, 10 * time.Millisecond}} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			// Three fresh gateways: a hold for the planned load (what issue 11
			// fixed) is in every one; a 2-core machine shared with builds
			// stalls a goroutine for tens of ms now and then (2 of 27 attempts
			// at load 5–13), so one slow attempt of three is tolerated.
			slow := 0
			for range 3 {
				if worst := firstRequests(t, firstProfile, tc.n, post); worst > firstBound {
					slow++
					t.Logf("slowest of %d first requests took %v: over %v (compute %v)", tc.n, worst, firstBound, tc.compute)
				}
			}
			if slow > 1 {
				t.Errorf("%d of 3 fresh gateways answered %d first request(s) in more than %v (compute %v; the deadline flush holds them ~45 ms)", slow, tc.n, firstBound, tc.compute)
			}
		})
	}
}

// firstRequests starts a fresh gateway over n backends and sends it n
// concurrent first requests; it returns the slowest one's latency.
func firstRequests(t *testing.T, configText string, n int, post func(*fasthttp.Client, string) (time.Duration, int)) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// One backend a request: the plan's machines share the pool's backends
	// (placement round-robin), and with fewer backends than concurrent
	// requests the backends' own queues, not the gateway, would set the time
	// (on 1 backend: 5, 10, …, 40 ms of queue).
	// At least two: the plan is fitted to the pool (serving), so on one
	// backend its one machine is planned 80% busy at the fitted rate, and
	// FlushIdle's guard rightly fills a batch there (a lone first request
	// then waits for its deadline flush, 42 ms of the 50 ms SLO); on two,
	// each machine carries half the rate and the fresh dispatcher's warm-up
	// gap decides, which is what this test is about.
	url := startPool(t, ctx, configText, max(n, 2), nil)
	// Open the connections first, so the measured time is the gateway's, not
	// the dial's: a GET of the metadata does not touch the dispatcher.
	c := &fasthttp.Client{}
	var warm sync.WaitGroup
	for range n {
		warm.Add(1)
		go func() {
			defer warm.Done()
			if code, _, err := c.Get(nil, url+"/v2/models/one"); err != nil || code != 200 {
				t.Errorf("metadata: %d %v", code, err)
			}
		}()
	}
	warm.Wait()
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			var code int
			lat[i], code = post(c, url)
			if code != 200 {
				t.Errorf("request %d: status %d", i, code)
			}
		}()
	}
	close(start)
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("%d first request(s): %v", n, lat)
	return lat[n-1]
}

// refuseProfile is a module whose one machine, once a request runs on it,
// is busy for 60 s: every request after that is refused (its predicted
// completion, 120 s, is past its 90 s SLO).
const refuseProfile = `
hardware:
  - {name: v100, price: 1}
profiles:
  - model: m
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 60s}
sessions:
  - name: one
    slo: 90s
    modules:
      - {name: m, model: m, rate: 0.01}
`

// BenchmarkRefused429 measures the time to a 429: a request the gateway
// refuses because its module's machines are saturated, from the client's
// send to its receipt of the 429, over KServe v2 HTTP on loopback (one
// connection, sequential). It reports p50/p99 in ms beside ns/op; allocs/op
// count the whole process (fasthttp client, gateway, idle backend), the
// gateway's refused path being most of it. Issue 11's target: p99 ≤ 1 ms.
//
//	go test -run '^$' -bench Refused429 -benchmem ./cmd/piccolo
func BenchmarkRefused429(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := startPool(b, ctx, refuseProfile, 1, onePlan)
	c := &fasthttp.Client{}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url + "/v2/models/one/infer")
	req.Header.SetMethod("POST")
	req.SetBody([]byte(`{"inputs":[{"name":"input0","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}`))
	// Occupy the machine: the first request runs for 60 s (its client gives
	// up after 100 ms; the gateway keeps it), so every later one is refused.
	// It is sent, and given up, before the loop below sends anything: were
	// the two sent together, the loop's could be the one admitted.
	r := fasthttp.AcquireResponse()
	_ = c.DoTimeout(req, r, 100*time.Millisecond)
	fasthttp.ReleaseResponse(r)
	for i := 0; ; i++ {
		if err := c.DoTimeout(req, resp, 5*time.Second); err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode() == fasthttp.StatusTooManyRequests {
			break
		}
		if i == 100 {
			b.Fatalf("no 429 after %d requests: last status %d", i, resp.StatusCode())
		}
		time.Sleep(10 * time.Millisecond)
	}
	lat := make([]time.Duration, 0, 1<<16)
	other := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if err := c.DoTimeout(req, resp, 5*time.Second); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		if resp.StatusCode() != fasthttp.StatusTooManyRequests {
			other++
		}
	}
	b.StopTimer()
	if other > 0 {
		b.Fatalf("%d of %d answers were not 429", other, len(lat))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50_ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99_ms")
}
