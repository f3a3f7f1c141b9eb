package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/controlplane"
	"github.com/piccolo-serving/piccolo/internal/consultest"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// helperEnv switches the test binary into a `piccolo backend` child process
// (TestHelperBackendProcess), so a test can SIGKILL a real backend process.
const helperEnv = "PICCOLO_TEST_BACKEND_OPTS"

// TestHelperBackendProcess is not a test: run as a child process with
// helperEnv set (JSON backendOptions fields), it serves a backend, prints
// "ADDR host:port" on stdout and exits when its stdin closes (the parent died).
func TestHelperBackendProcess(t *testing.T) {
	var h struct{ Config, Hardware, Consul, ID string }
	helperMain(t, helperEnv, &h, func(ctx context.Context) error {
		o := &backendOptions{listen: "127.0.0.1:0", hardware: h.Hardware, files: []string{h.Config}, executor: "sim",
			logFmt: "json", drain: 2 * time.Second, metrics: "off", consul: h.Consul, id: h.ID}
		return runBackend(ctx, o, func(a string) { fmt.Printf("ADDR %s\n", a) })
	})
}

// helperMain is the body of a helper-process "test": skipped unless env is
// set; else env's JSON is read into spec and run is called with a context that
// ends when stdin closes (the parent died), and the process exits 0 when run
// returns nil, 1 with the error on stderr otherwise (2: a malformed spec).
// startChild starts such a process.
func helperMain(t *testing.T, env string, spec any, run func(ctx context.Context) error) {
	js := os.Getenv(env)
	if js == "" {
		t.Skip("helper process for the Consul tests")
	}
	if err := json.Unmarshal([]byte(js), spec); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// backendProc is a `piccolo backend --consul` child process.
type backendProc struct {
	id, addr string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
}

func startBackendProc(t *testing.T, cfgPath, hardware, consul, id string) *backendProc {
	t.Helper()
	cmd, stdin, addr := startChild(t, "TestHelperBackendProcess", helperEnv,
		map[string]string{"Config": cfgPath, "Hardware": hardware, "Consul": consul, "ID": id}, "ADDR ")
	return &backendProc{id: id, addr: addr, cmd: cmd, stdin: stdin}
}

// startChild runs the test binary as a helper process: only the test named
// helper, with env set to spec as JSON. It returns once the child prints a line
// starting with prefix (the rest of the line is returned); the child is killed
// in the test's Cleanup, and sees its stdin close when the parent dies.
func startChild(t *testing.T, helper, env string, spec any, prefix string) (*exec.Cmd, io.WriteCloser, string) {
	t.Helper()
	js, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$")
	cmd.Env = append(os.Environ(), env+"="+string(js))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &lockedWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				select {
				case line <- rest:
				default:
				}
			}
		}
	}()
	select {
	case rest := <-line:
		return cmd, stdin, rest
	case <-time.After(30 * time.Second):
		t.Fatalf("%s (%s) did not start; stderr:\n%s", helper, string(js), stderr.String())
	}
	return nil, nil, ""
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// checkAnswered fails t for every request without an HTTP answer (the first
// three are named, by send time after ref) and for every failure without an
// error message; it returns how many got no answer.
func checkAnswered(t *testing.T, outs []outcome, ref time.Time) int {
	t.Helper()
	unanswered := 0
	for _, o := range outs {
		if o.status == 0 {
			unanswered++
			if unanswered <= 3 {
				t.Errorf("request sent at +%v got no HTTP answer: %s", o.sent.Sub(ref).Round(time.Millisecond), o.body)
			}
		} else if o.status != 200 && !strings.Contains(o.body, "error") {
			t.Errorf("status %d without an error message: %q", o.status, o.body)
		}
	}
	return unanswered
}

// startConsulRig starts a Consul agent, writes consulTestConfig at rate (req/s)
// and starts n `piccolo backend --consul` processes gpu-0… registered there.
func startConsulRig(t *testing.T, rate float64, n int) (*consultest.Agent, string, map[string]*backendProc) {
	t.Helper()
	agent := consultest.Start(t)
	cfgPath := filepath.Join(t.TempDir(), "piccolo.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, consulTestConfig, rate), 0o644); err != nil {
		t.Fatal(err)
	}
	procs := map[string]*backendProc{}
	for i := range n {
		id := fmt.Sprintf("gpu-%d", i)
		procs[id] = startBackendProc(t, cfgPath, "v100", agent.Addr(), id)
	}
	return agent, cfgPath, procs
}

// outcome is one request of the test's open-loop load.
type outcome struct {
	sent    time.Time
	status  int // 0: no HTTP answer (transport error)
	latency time.Duration
	body    string
}

// poissonLoad sends POSTs to url with Poisson arrivals at rate req/s (rate()
// read at each send) until ctx ends, then waits for the answers.
type poissonLoad struct {
	mu   sync.Mutex
	outs []outcome
	ok   atomic.Int64
	wg   sync.WaitGroup
}

func startLoad(ctx context.Context, url, body string, rate func() float64) *poissonLoad {
	l := &poissonLoad{}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 500, MaxConnsPerHost: 0}}
	rng := rand.New(rand.NewPCG(1, 2))
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		next := time.Now()
		for ctx.Err() == nil {
			next = next.Add(time.Duration(rng.ExpFloat64() / rate() * float64(time.Second)))
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				o := outcome{sent: time.Now()}
				resp, err := client.Post(url, "application/json", strings.NewReader(body))
				o.latency = time.Since(o.sent)
				if err != nil {
					o.body = err.Error()
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					o.status, o.body = resp.StatusCode, string(b)
					if o.status == 200 {
						l.ok.Add(1)
					}
				}
				l.mu.Lock()
				l.outs = append(l.outs, o)
				l.mu.Unlock()
			}()
		}
	}()
	return l
}

func (l *poissonLoad) wait() []outcome {
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.outs)
	slices.SortFunc(out, func(a, b outcome) int { return a.sent.Compare(b.sent) })
	return out
}

// attainment is the share of requests sent in [from, to) answered 200 within slo.
func attainment(outs []outcome, from, to time.Time, slo time.Duration) (float64, int) {
	n, good := 0, 0
	for _, o := range outs {
		if o.sent.Before(from) || !o.sent.Before(to) {
			continue
		}
		n++
		if o.status == 200 && o.latency <= slo {
			good++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return float64(good) / float64(n), n
}

// planEvents collects the plans the gateway made live.
type planEvents struct {
	mu  sync.Mutex
	evs []controlplane.PlanEvent
	ch  chan controlplane.PlanEvent
}

func newPlanEvents() *planEvents { return &planEvents{ch: make(chan controlplane.PlanEvent, 100)} }

func (p *planEvents) add(e controlplane.PlanEvent) {
	p.mu.Lock()
	p.evs = append(p.evs, e)
	p.mu.Unlock()
	select {
	case p.ch <- e:
	default:
	}
}

func (p *planEvents) last() controlplane.PlanEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.evs[len(p.evs)-1]
}

// waitPlan waits for a plan made live that satisfies ok.
func (p *planEvents) waitPlan(t testing.TB, timeout time.Duration, what string, ok func(controlplane.PlanEvent) bool) controlplane.PlanEvent {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case e := <-p.ch:
			if ok(e) {
				return e
			}
		case <-deadline:
			p.mu.Lock()
			var cs []string
			for _, e := range p.evs {
				cs = append(cs, e.Cause)
			}
			p.mu.Unlock()
			t.Fatalf("no plan with %s within %v (plans so far: %v)", what, timeout, cs)
		}
	}
}

func placedOn(p *api.Plan) []string {
	var ids []string
	for _, sp := range p.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				ids = append(ids, g.Backends...)
			}
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

const consulTestConfig = `
membership: consul
hardware:
  - {name: v100, price: 3}
profiles:
  - model: det
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 10ms}
      - {batch: 4, concurrency: 1, duration: 20ms}
      - {batch: 8, concurrency: 1, duration: 30ms}
sessions:
  - name: s
    slo: 400ms
    modules:
      - {name: d, model: det, rate: %v}
`

// startConsulGateway runs `piccolo gateway --consul` in-process and returns
// its HTTP base URL; with consul "", `piccolo gateway` on its static backends.
func startConsulGateway(t testing.TB, ctx context.Context, cfgPath, consul string, ctl replan.Options, mon replan.MonitorOptions,
	evs *planEvents) string {
	t.Helper()
	o := &gatewayOptions{files: []string{cfgPath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", policy: "piccolo",
		dispatch: "tc", maxBody: 1 << 20, slack: 0.1, logFmt: "json", drain: 5 * time.Second, consul: consul,
		schedule: true, adminToken: "tok", loop: ctl, monitor: mon, onPlan: evs.add}
	gaddr := make(chan string, 1)
	gdone := make(chan error, 1)
	go func() { gdone <- runGateway(ctx, o, func(h, _ string) { gaddr <- h }) }()
	t.Cleanup(func() {
		select {
		case <-gdone:
		case <-time.After(15 * time.Second):
			t.Error("gateway did not stop")
		}
	})
	select {
	case h := <-gaddr:
		return "http://" + h
	case err := <-gdone:
		t.Fatalf("gateway exited: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("gateway did not start")
	}
	return ""
}

func metricLine(t testing.TB, url, name string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			return line
		}
	}
	return ""
}

const inferBody = `{"inputs":[{"name":"input0","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`

// TestGatewayConsulBackendKilled is issue 4's integration test: a gateway with
// the embedded control loop, four sim backends (child processes) joined through
// a real Consul agent, Poisson load; one backend placed in the plan is
// SIGKILLed. It must be out of the dispatch table within 5 s, the new plan live
// within 1 s of Consul reporting the change, every request answered, and SLO
// attainment ≥ 99% after the re-plan. Then Consul is stopped: requests keep
// flowing on the last membership and piccolo_membership_stale reads 1.
func TestGatewayConsulBackendKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Consul and four backend processes")
	}
	const rate = 300.0
	agent, cfgPath, procs := startConsulRig(t, rate, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs := newPlanEvents()
	url := startConsulGateway(t, ctx, cfgPath, agent.Addr(), replan.Options{}, replan.MonitorOptions{}, evs)
	// The gateway starts with whoever registered first; wait for all four.
	deadline := time.Now().Add(20 * time.Second)
	for len(membersOf(t, url)) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("gateway sees backends %v, want 4", membersOf(t, url))
		}
		time.Sleep(100 * time.Millisecond)
	}

	lctx, stopLoad := context.WithCancel(ctx)
	load := startLoad(lctx, url+"/v2/models/s/infer", inferBody, func() float64 { return rate })
	time.Sleep(4 * time.Second)

	before := evs.last()
	used := placedOn(before.Plan)
	victim := procs[used[len(used)-1]]
	t.Logf("plan before the kill: cost %.2f on %v; killing %s", before.Plan.TotalCost, used, victim.id)
	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	after := evs.waitPlan(t, 10*time.Second, victim.id+" out of the dispatch table", func(e controlplane.PlanEvent) bool {
		return !slices.Contains(placedOn(e.Plan), victim.id)
	})
	outIn := after.Live.Sub(killed)
	reported := after.Trigger.Sub(killed)
	liveIn := after.Live.Sub(after.Trigger)
	t.Logf("SIGKILL → Consul reported the change: %v; → new plan live: %v (%v after the report); cause %s, now on %v",
		reported.Round(time.Millisecond), outIn.Round(time.Millisecond), liveIn.Round(time.Millisecond), after.Cause, placedOn(after.Plan))
	if after.Cause != replan.CauseMembership {
		t.Errorf("re-plan cause %q, want %q", after.Cause, replan.CauseMembership)
	}
	if outIn > 5*time.Second {
		t.Errorf("killed backend out of the dispatch table after %v, want ≤ 5 s", outIn)
	}
	if liveIn > time.Second {
		t.Errorf("new plan live %v after Consul reported the change, want ≤ 1 s", liveIn)
	}
	time.Sleep(8 * time.Second)
	tailEnd := time.Now()

	// Consul stopped mid-run: serving continues on the last members.
	okBefore := load.ok.Load()
	stopped := time.Now()
	agent.Stop()
	time.Sleep(4 * time.Second)
	okDuring := load.ok.Load() - okBefore
	stale := metricLine(t, url, "piccolo_membership_stale")
	var view struct {
		Stale    bool
		Backends []struct{ ID string }
	}
	if st, b := adminDo(t, url, "GET", "/admin/backends", "tok", ""); st != 200 || json.Unmarshal([]byte(b), &view) != nil ||
		!view.Stale || len(view.Backends) != 3 {
		t.Errorf("GET /admin/backends with Consul stopped: %d %s; want stale with the last 3 members", st, b)
	}
	stopLoad()
	outs := load.wait()

	slo := 400 * time.Millisecond
	unanswered := checkAnswered(t, outs, killed)
	pre, npre := attainment(outs, killed.Add(-3*time.Second), killed, slo)
	win, nwin := attainment(outs, killed, after.Live, slo)
	tail, ntail := attainment(outs, after.Live.Add(time.Second), tailEnd, slo)
	during, nduring := attainment(outs, stopped, stopped.Add(4*time.Second), slo)
	t.Logf("requests: %d, all answered: %v; SLO attainment before the kill %.4f (%d), kill → re-plan %.4f (%d), after re-plan %.4f (%d), Consul stopped %.4f (%d, %d OK); %s",
		len(outs), unanswered == 0, pre, npre, win, nwin, tail, ntail, during, nduring, okDuring, stale)
	if tail < 0.99 {
		t.Errorf("SLO attainment after the re-plan %.4f over %d requests, want ≥ 0.99", tail, ntail)
	}
	if okDuring < int64(rate) {
		t.Errorf("%d requests answered OK in 4 s with Consul stopped, want ≥ %v", okDuring, rate)
	}
	if during < 0.99 {
		t.Errorf("SLO attainment with Consul stopped %.4f over %d requests, want ≥ 0.99", during, nduring)
	}
	if stale != "piccolo_membership_stale 1" {
		t.Errorf("with Consul stopped: metric %q, want piccolo_membership_stale 1", stale)
	}
	cancel()
}

// membersOf returns the backends the admin view would list (the gateway's
// piccolo_membership_backends gauge, summed).
func membersOf(t testing.TB, url string) []string {
	t.Helper()
	line := metricLine(t, url, `piccolo_membership_backends`)
	var n float64
	if i := strings.LastIndexByte(line, ' '); i > 0 {
		fmt.Sscan(line[i+1:], &n)
	}
	return make([]string, int(n))
}

// TestGatewayConsulRateStep steps the offered rate R → 2R → R with the
// controller's hysteresis shortened (up after 1 s, down after 2 s, the envelopes horizon 2 s): a "rate" plan must be live within 10 s of each step, costing more
// after the step up and less (fewer machines) after the step down.
func TestGatewayConsulRateStep(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Consul and two backend processes")
	}
	const rate = 120.0
	agent, cfgPath, _ := startConsulRig(t, rate, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs := newPlanEvents()
	url := startConsulGateway(t, ctx, cfgPath, agent.Addr(), replan.Options{Tick: 250 * time.Millisecond,
		SustainUp: time.Second, SustainDown: 2 * time.Second},
		replan.MonitorOptions{Horizon: 2 * time.Second}, evs)
	var cur atomic.Value
	cur.Store(rate)
	lctx, stopLoad := context.WithCancel(ctx)
	load := startLoad(lctx, url+"/v2/models/s/infer", inferBody, func() float64 { return cur.Load().(float64) })
	defer func() { stopLoad(); load.wait() }()
	time.Sleep(5 * time.Second)

	base := evs.last()
	stepUp := time.Now()
	cur.Store(2 * rate)
	up := evs.waitPlan(t, 10*time.Second, "cause rate and a higher cost", func(e controlplane.PlanEvent) bool {
		return e.Cause == replan.CauseRate && e.Plan.TotalCost > base.Plan.TotalCost*1.4
	})
	t.Logf("R→2R: rate plan live after %v: cost %.2f → %.2f, backends %v → %v", up.Live.Sub(stepUp).Round(time.Millisecond),
		base.Plan.TotalCost, up.Plan.TotalCost, placedOn(base.Plan), placedOn(up.Plan))
	time.Sleep(3 * time.Second)
	high := evs.last()
	stepDown := time.Now()
	cur.Store(rate)
	down := evs.waitPlan(t, 10*time.Second, "cause rate and a lower cost", func(e controlplane.PlanEvent) bool {
		return e.Cause == replan.CauseRate && e.Plan.TotalCost < high.Plan.TotalCost*0.8
	})
	t.Logf("2R→R: rate plan live after %v: cost %.2f → %.2f, backends %v → %v", down.Live.Sub(stepDown).Round(time.Millisecond),
		high.Plan.TotalCost, down.Plan.TotalCost, placedOn(high.Plan), placedOn(down.Plan))
	if len(placedOn(down.Plan)) > len(placedOn(high.Plan)) {
		t.Errorf("step down placed on %v, more backends than %v", placedOn(down.Plan), placedOn(high.Plan))
	}
}
