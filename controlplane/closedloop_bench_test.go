package controlplane

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/dataplane"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"github.com/piccolo-serving/piccolo/kserve"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/serving"
)

// closedLoopConfig is one module on sim backends whose batches take 1–2 ms
// (batch 1: 1 ms … batch 64: 2 ms), planned for more than the machine can
// send; model "bare" is the same compute, one request a call, for the bare
// handler.
const closedLoopConfig = `
hardware:
  - {name: v100, price: 1}
profiles:
  - model: m
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 1ms}
      - {batch: 4, concurrency: 1, duration: 1200us}
      - {batch: 16, concurrency: 1, duration: 1500us}
      - {batch: 64, concurrency: 1, duration: 2ms}
  - model: bare
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1024, duration: 1500us}
sessions:
  - name: one
    slo: 100ms
    modules:
      - {name: m, model: m, rate: 20000}
`

// BenchmarkClosedLoop is the closed-loop comparison of docs/closed-loop.md:
// wrk (Debian's; scripts/tools.sh installs it) with 32, 128 and 512
// connections, each sending its next request when the last one is answered,
// against (a) the gateway — kserve's HTTP server, the DAGRunner and the
// embedded control with its live dispatch (TC, flush idle) on a one-module
// plan over in-process sim backends (1–2 ms a batch) — and (b) a bare
// fasthttp handler that decodes the same KServe v2 JSON, sends it alone to a
// sim backend (1.5 ms, over gRPC) and encodes the answer: the backend hop is
// in both. Rounds alternate so that load from elsewhere hits both alike. It
// reports, per connection count, both throughputs (answers 200 per second),
// their ratio (target ≥ 0.5) and p50/p99 latency (target: gateway p99 at 32
// connections ≤ compute + 5 ms), and the gateway dispatcher's batches.
// PICCOLO_CLOSEDLOOP_CPUPROFILE=FILE writes a CPU profile of the gateway's
// round at PICCOLO_CLOSEDLOOP_PROFILE_CONNS connections (default 512) only;
// PICCOLO_CLOSEDLOOP_DURATION sets a round's length (default 5s).
//
//	go test -run '^$' -bench ClosedLoop -benchtime 1x ./controlplane
//	scripts/closed-loop.sh   (the same, with the table printed)
func BenchmarkClosedLoop(b *testing.B) {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		b.Skip("wrk not installed: run scripts/tools.sh (Debian package wrk)")
	}
	base, err := api.LoadBytes(api.NamedDoc{Name: "closed-loop.yaml", Data: []byte(closedLoopConfig)})
	if err != nil {
		b.Fatal(err)
	}
	full := closedLoopConfig + testharness.StartSimBackends(b, base.Profiles, 4)
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "closed-loop.yaml", Data: []byte(full)})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	planner := func(c *api.Config) (*api.Plan, error) {
		return serving.Plan(c, serving.Options{Scheduler: planner.Options{Policy: "piccolo"}})
	}
	ec, err := StartEmbedded(ctx, cfg, EmbeddedOptions{Planner: planner,
		Live: dataplane.LiveOptions{Policy: dispatcher.TC{}, Flush: dispatcher.FlushIdle, Admission: true}})
	if err != nil {
		b.Fatal(err)
	}
	defer ec.LiveSwitch().Close()
	exec, err := gateway.NewDAGRunner(ec.Runner(), cfg.Sessions)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := kserve.NewServer(exec, kserve.ServerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := srv.NewHTTPServer()
	go hs.Serve(gl)
	defer hs.Shutdown()

	// The bare handler's backend: its own sim, model "bare" loaded at batch 1.
	bareAddr, _ := testharness.StartSimBackend(b, base.Profiles)
	client, err := backends.NewClient(bareAddr, backends.ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	if err := client.Load(ctx, "bare", 1, 1024); err != nil {
		b.Fatal(err)
	}
	bare := testharness.ServeFast(b, bareHopHandler(client))

	dir := b.TempDir()
	script := filepath.Join(dir, "post.lua")
	lua := fmt.Sprintf("wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.body = %q\n", testharness.InferBody)
	if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
		b.Fatal(err)
	}
	dur := 5 * time.Second
	if s := os.Getenv("PICCOLO_CLOSEDLOOP_DURATION"); s != "" {
		if dur, err = time.ParseDuration(s); err != nil {
			b.Fatalf("PICCOLO_CLOSEDLOOP_DURATION %q: %v", s, err)
		}
	}
	gwURL := "http://" + gl.Addr().String() + "/v2/models/one/infer"
	bareURL := "http://" + bare + "/"
	run := func(url string, conns int, d time.Duration) wrkResult {
		return runWrk(b, wrk, script, url, conns, d)
	}
	run(gwURL, 128, 2*time.Second) // warm up; the control loop re-plans to the measured rate
	run(bareURL, 128, time.Second)
	var prof *os.File
	profAt := os.Getenv("PICCOLO_CLOSEDLOOP_PROFILE_CONNS")
	if profAt == "" {
		profAt = "512"
	}
	if f := os.Getenv("PICCOLO_CLOSEDLOOP_CPUPROFILE"); f != "" {
		if prof, err = os.Create(f); err != nil {
			b.Fatal(err)
		}
		defer prof.Close()
	}
	b.ResetTimer()
	say("| connections | gateway req/s | bare req/s | ratio | gateway p50 / p99 ms | bare p50 / p99 ms | gateway non-200 |")
	say("|---|---|---|---|---|---|---|")
	for _, conns := range []int{32, 128, 512} {
		profiling := prof != nil && strconv.Itoa(conns) == profAt
		if profiling {
			if err := pprof.StartCPUProfile(prof); err != nil {
				b.Fatal(err)
			}
		}
		before := ec.LiveSwitch().Runner().Stats()["one/m"]
		g := run(gwURL, conns, dur)
		after := ec.LiveSwitch().Runner().Stats()["one/m"]
		if profiling {
			pprof.StopCPUProfile()
		}
		r := run(bareURL, conns, dur)
		say("| %d | %.0f | %.0f | %.2f | %.2f / %.2f | %.2f / %.2f | %d |", conns, g.ok, r.ok, g.ok/r.ok,
			g.p50, g.p99, r.p50, r.p99, g.errors)
		batches := func(c dispatcher.Closer) uint64 { return after.Closed[c] - before.Closed[c] }
		nb := batches(dispatcher.ClosedFull) + batches(dispatcher.ClosedDeadline) + batches(dispatcher.ClosedIdle)
		say("    gateway's dispatcher at %d connections: %d batches (mean %.1f items) closed full %d, deadline %d, idle %d; items failed at send (deadline) %d",
			conns, nb, float64(after.Completed-before.Completed)/float64(max(nb, 1)), batches(dispatcher.ClosedFull),
			batches(dispatcher.ClosedDeadline), batches(dispatcher.ClosedIdle), after.DeadlineOnSend-before.DeadlineOnSend)
		var busy time.Duration
		for i := range after.Slots {
			busy += after.Slots[i].Busy
			if i < len(before.Slots) {
				busy -= before.Slots[i].Busy
			}
		}
		say("    batch sent → done, mean %.2f ms; machines busy %.0f%% of the run", busy.Seconds()*1000/float64(max(nb, 1)),
			100*busy.Seconds()/dur.Seconds())
		b.ReportMetric(g.ok/r.ok, fmt.Sprintf("ratio_c%d", conns))
		b.ReportMetric(g.p99, fmt.Sprintf("gw_p99_ms_c%d", conns))
	}
	if st := ec.Controller().Status(); st.Last != nil {
		say("plan served: cost %.2f on %v (cause %s)", st.Last.Plan.TotalCost, placedOn(st.Last.Plan), st.Last.Cause)
	}
}

// bareHopHandler is kserve's bare benchmark handler (the decode and encode a
// gateway cannot do without; kserve's tests cannot be imported) plus the
// backend hop: the request's inputs go alone to model "bare" over gRPC.
func bareHopHandler(c *backends.Client) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		var req gateway.InferRequest
		if err := kserve.DecodeInferRequest(ctx.PostBody(), &req); err != nil {
			ctx.SetStatusCode(400)
			return
		}
		out, err := c.Infer(ctx, "bare", [][]api.Tensor{req.Inputs})
		if err != nil || len(out) != 1 {
			ctx.SetStatusCode(502)
			return
		}
		resp := gateway.InferResponse{ModelName: "one", ID: req.ID, Outputs: out[0],
			Parameters: []gateway.Param{{Key: "piccolo.m.queue_ms", Value: 0}, {Key: "piccolo.m.compute_ms", Value: 0}, {Key: "piccolo.m.total_ms", Value: 0}, {Key: "piccolo.e2e_ms", Value: 0}}}
		b, _ := kserve.AppendInferResponse(make([]byte, 0, 1024), &resp)
		ctx.SetContentType("application/json")
		ctx.SetBody(b)
	}
}

// say prints a line of the benchmark's report on stdout (testing.B's log
// truncates long output).
func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// wrkResult is one wrk run: answers 200 per second, p50/p99 latency in ms
// (wrk's --latency distribution, over every response), and the count of
// non-200 answers and socket errors.
type wrkResult struct {
	ok, p50, p99 float64
	errors       int
}

var (
	wrkRate    = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkTotal   = regexp.MustCompile(`(\d+) requests in ([0-9.]+)(ms|s|m)`)
	wrkNon2xx  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSockErr = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkPct     = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)`)
)

// runWrk runs wrk with conns connections (2 threads) for d and parses its report.
func runWrk(b *testing.B, wrk, script, url string, conns int, d time.Duration) wrkResult {
	b.Helper()
	out, err := exec.Command(wrk, "-t", "2", "-c", strconv.Itoa(conns), "-d", fmt.Sprintf("%ds", int(d.Seconds())),
		"--latency", "-s", script, url).CombinedOutput()
	if err != nil {
		b.Fatalf("wrk: %v\n%s", err, out)
	}
	s := string(out)
	if os.Getenv("PICCOLO_CLOSEDLOOP_VERBOSE") != "" {
		say("wrk -c %d %s:\n%s", conns, url, s)
	}
	var r wrkResult
	m := wrkRate.FindStringSubmatch(s)
	if m == nil {
		b.Fatalf("wrk's report has no Requests/sec:\n%s", s)
	}
	rate, _ := strconv.ParseFloat(m[1], 64)
	total := 0
	if m := wrkTotal.FindStringSubmatch(s); m != nil {
		total, _ = strconv.Atoi(m[1])
	}
	if m := wrkNon2xx.FindStringSubmatch(s); m != nil {
		r.errors, _ = strconv.Atoi(m[1])
	}
	if m := wrkSockErr.FindStringSubmatch(s); m != nil {
		for _, v := range m[1:] {
			n, _ := strconv.Atoi(v)
			r.errors += n
		}
	}
	r.ok = rate
	if total > 0 {
		r.ok = rate * float64(max(total-r.errors, 0)) / float64(total)
	}
	for _, m := range wrkPct.FindAllStringSubmatch(s, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[3] {
		case "us":
			v /= 1000
		case "s":
			v *= 1000
		}
		if m[1] == "50" {
			r.p50 = v
		} else {
			r.p99 = v
		}
	}
	if strings.Contains(s, "Non-2xx") && r.errors > total/100 {
		say("wrk %s -c %d: %d of %d answers were not 200", url, conns, r.errors, total)
	}
	return r
}
