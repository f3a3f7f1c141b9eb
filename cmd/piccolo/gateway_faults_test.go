package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/metrics"
)

// faultHelperEnv switches the test binary into a static `piccolo backend`
// child (TestHelperFaultBackendProcess) on a given gRPC and metrics address,
// so a test can SIGKILL it and start it again on the same port.
const faultHelperEnv = "PICCOLO_TEST_FAULT_BACKEND"

// TestHelperFaultBackendProcess is not a test: see faultHelperEnv.
func TestHelperFaultBackendProcess(t *testing.T) {
	var h struct{ Config, Listen, Metrics string }
	helperMain(t, faultHelperEnv, &h, func(ctx context.Context) error {
		o := &backendOptions{listen: h.Listen, hardware: "v100", files: []string{h.Config}, executor: "sim", faultOn: true,
			logFmt: "json", drain: time.Second, metrics: h.Metrics}
		return runBackend(ctx, o, func(a string) { fmt.Printf("ADDR %s\n", a) })
	})
}

// staticFaultConfig is the Consul tests' config without `membership:
// consul`: one module at a rate (req/s) to fill in, on v100 sims.
var staticFaultConfig = strings.Replace(consulTestConfig, "membership: consul\n", "", 1)

// staticProc is a static `piccolo backend` child.
type staticProc struct {
	id, addr, metrics, cfg string
	kill                   func()
}

func startStaticProc(t *testing.T, p *staticProc) {
	t.Helper()
	cmd, stdin, _ := startChild(t, "TestHelperFaultBackendProcess", faultHelperEnv,
		map[string]string{"Config": p.cfg, "Listen": p.addr, "Metrics": p.metrics}, "ADDR ")
	p.kill = func() { _ = cmd.Process.Kill(); stdin.Close() }
}

// startStaticRig starts n backends gpu-0… and writes the config listing them.
func startStaticRig(t *testing.T, n int, rate float64) (string, []*staticProc) {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "piccolo.yaml")
	var procs []*staticProc
	text := fmt.Sprintf(staticFaultConfig, rate) + "backends:\n"
	for i := range n {
		p := &staticProc{id: fmt.Sprintf("gpu-%d", i), addr: freeAddr(t), metrics: freeAddr(t), cfg: cfgPath}
		procs = append(procs, p)
		text += fmt.Sprintf("  - {id: %s, address: %q, hardware: v100}\n", p.id, p.addr)
	}
	if err := os.WriteFile(cfgPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		startStaticProc(t, p)
	}
	return cfgPath, procs
}

func startStaticGateway(t *testing.T, ctx context.Context, cfgPath string, hedge float64) string {
	t.Helper()
	o := &gatewayOptions{files: []string{cfgPath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", policy: "piccolo", dispatch: "tc",
		maxBody: 1 << 20, slack: 0.1, logFmt: "json", drain: time.Second, hedge: hedge, probeEvery: 200 * time.Millisecond}
	url, _ := startGateway(t, ctx, o)
	return url
}

// scrape returns the value of the series of name whose labels include every
// label="value" in labels (summed over several), from url's /metrics.
func scrape(t testing.TB, url, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sum := 0.0
next:
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// waitFor polls ok every 5 ms and returns how long it took to hold, or fails t
// after limit.
func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not after %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// TestGatewayStaticBackendKilled is issue 12's measurement and issue 32's:
// static mode, three sim backend processes, Poisson load at the planned rate;
// backends are SIGKILLed at once mid-run, then restarted on their ports.
//   - "one": a plan on two of the three at 400 req/s, one placed backend
//     killed (issue 12);
//   - "two": a plan at 150 req/s, which one backend carries, and two of the
//     three killed together, the placed ones first, so the re-placement meets
//     a dead spare before it finds the live one (issue 32).
//
// At most 0.1% of requests may fail, ≥ 99% must meet the SLO, a dead
// backend must leave the dispatch table at once (measured by polling
// piccolo_gateway_backend_up) and serve again ≤ 5 s after its restart.
func TestGatewayStaticBackendKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three backend processes and runs load for 12 s")
	}
	for _, c := range []struct {
		name  string
		rate  float64
		kills int
	}{{"one", 400, 1}, {"two", 150, 2}} {
		t.Run(c.name, func(t *testing.T) { gatewayStaticKilled(t, c.rate, c.kills) })
	}
}

func gatewayStaticKilled(t *testing.T, rate float64, kills int) {
	cfgPath, procs := startStaticRig(t, 3, rate)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := startStaticGateway(t, ctx, cfgPath, 0.05)
	lctx, stopLoad := context.WithCancel(ctx)
	load := startLoad(lctx, url+"/v2/models/s/infer", inferBody, func() float64 { return rate })
	time.Sleep(3 * time.Second)

	// The victims: the placed backends (those with batches) first.
	var victims, rest []*staticProc
	for _, p := range procs {
		if scrape(t, url, metrics.DispatcherBatchesTotal, `backend="`+p.id+`"`) > 0 {
			victims = append(victims, p)
		} else {
			rest = append(rest, p)
		}
	}
	if len(victims) == 0 {
		t.Fatal("no backend got a batch")
	}
	victims = append(victims, rest...)[:kills]
	// allUp reports whether every victim's piccolo_gateway_backend_up is want.
	allUp := func(want float64) bool {
		for _, p := range victims {
			if scrape(t, url, metrics.GatewayBackendUp, `backend="`+p.id+`"`) != want {
				return false
			}
		}
		return true
	}
	killed := time.Now()
	for _, p := range victims {
		p.kill() // SIGKILL
	}
	out := waitFor(t, 5*time.Second, "victims out of the dispatch table", func() bool { return allUp(0) })
	time.Sleep(3 * time.Second)
	restarted := time.Now()
	batches := make([]float64, len(victims))
	for i, p := range victims {
		startStaticProc(t, p)
		batches[i] = scrape(t, url, metrics.DispatcherBatchesTotal, `backend="`+p.id+`"`)
	}
	started := time.Since(restarted)
	// Serving again: up, and (with one victim, whom the re-placement takes
	// back) given a batch. With two, the plan needs one machine, and the
	// survivor keeps it, so only the first victim is waited on for batches.
	back := waitFor(t, 10*time.Second, "restarted backends serving again", func() bool {
		return allUp(1) && (kills > 1 || scrape(t, url, metrics.DispatcherBatchesTotal, `backend="`+victims[0].id+`"`) > batches[0])
	})
	time.Sleep(3 * time.Second)
	stopLoad()
	outs := load.wait()

	slo := 400 * time.Millisecond
	unanswered := checkAnswered(t, outs, killed)
	failed := 0
	for _, o := range outs {
		if o.status != 200 {
			failed++
			if failed <= 30 {
				t.Logf("failed: sent +%v after the kill, %d %.120s", o.sent.Sub(killed).Round(time.Millisecond), o.status, o.body)
			}
		}
	}
	all, n := attainment(outs, outs[0].sent, time.Now(), slo)
	win, nwin := attainment(outs, killed, killed.Add(time.Second), slo)
	retries := scrape(t, url, metrics.GatewayRetriesTotal)
	ids := make([]string, len(victims))
	for i, p := range victims {
		ids[i] = p.id
	}
	t.Logf("SIGKILL %s: out of the dispatch table ≤ %v after the kill (polling /metrics every 5 ms); restarted (processes up in %v), serving again %v later",
		strings.Join(ids, ", "), out.Round(time.Millisecond), started.Round(time.Millisecond), back.Round(time.Millisecond))
	t.Logf("requests %d: failed %d (%.3f%%), unanswered %d, within SLO %.3f%%; the second after the kill %.3f%% of %d; retried batches %.0f",
		n, failed, 100*float64(failed)/float64(n), unanswered, 100*all, 100*win, nwin, retries)
	if float64(failed) > 0.001*float64(n) {
		t.Errorf("%d of %d requests failed; want ≤ 0.1%%", failed, n)
	}
	if all < 0.99 {
		t.Errorf("SLO attainment %.4f; want ≥ 0.99", all)
	}
	if back > 5*time.Second {
		t.Errorf("restarted backends serving again after %v; want ≤ 5 s", back)
	}
}

// TestGatewayStaticSlowBackend: two gateways side by side, one hedging
// (--hedge-budget 0.05), one not (0), each over its own backend processes
// under the same Poisson load; one placed backend of each is slowed 3× through
// its /admin/faults mid-run. It logs SLO attainment during the slow spell, the
// hedges and the extra machine time, for docs/faults.md; with spare=false
// the plan has no spare backend to move to.
func TestGatewayStaticSlowBackend(t *testing.T) {
	if os.Getenv("PICCOLO_FAULT_MATRIX") != "1" {
		t.Skip("a measurement for docs/faults.md (two 10 s runs of two gateways): PICCOLO_FAULT_MATRIX=1 runs it")
	}
	for _, n := range []int{3, 2} {
		t.Run(fmt.Sprintf("%d backends", n), func(t *testing.T) { gatewayStaticSlow(t, n) })
	}
}

func gatewayStaticSlow(t *testing.T, n int) {
	const rate = 250.0 // each; two gateways at 400 req/s overload a shared 2-core host
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type side struct {
		url    string
		procs  []*staticProc
		load   *poissonLoad
		victim *staticProc
	}
	sides := map[string]*side{}
	for name, hedge := range map[string]float64{"hedge 0.05": 0.05, "hedge 0": 0} {
		cfgPath, procs := startStaticRig(t, n, rate)
		sides[name] = &side{url: startStaticGateway(t, ctx, cfgPath, hedge), procs: procs}
	}
	lctx, stopLoad := context.WithCancel(ctx)
	for _, s := range sides {
		s.load = startLoad(lctx, s.url+"/v2/models/s/infer", inferBody, func() float64 { return rate })
	}
	time.Sleep(3 * time.Second)
	slowed := time.Now()
	for name, s := range sides {
		for _, p := range s.procs {
			if scrape(t, s.url, metrics.DispatcherBatchesTotal, `backend="`+p.id+`"`) > 0 {
				s.victim = p
				break
			}
		}
		req, _ := http.NewRequest("PUT", "http://"+s.victim.metrics+"/admin/faults", strings.NewReader(`{"slow": 3}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: PUT /admin/faults slow=3 on %s: %v %v", name, s.victim.id, resp, err)
		}
		resp.Body.Close()
	}
	time.Sleep(6 * time.Second)
	stopLoad()
	for _, name := range []string{"hedge 0.05", "hedge 0"} {
		s := sides[name]
		outs := s.load.wait()
		failed := 0
		kinds := map[string]int{}
		for _, o := range outs {
			if o.status != 200 {
				failed++
				k := o.body
				if len(k) > 90 {
					k = k[:90]
				}
				kinds[fmt.Sprintf("%d %s +%v", o.status, k, o.sent.Sub(slowed).Truncate(time.Second))]++
			}
		}
		if len(kinds) > 0 {
			t.Logf("%s failures: %v", name, kinds)
		}
		used := 0
		for _, p := range s.procs {
			if scrape(t, s.url, metrics.DispatcherBatchesTotal, `backend="`+p.id+`"`) > 0 {
				used++
			}
		}
		t.Logf("%s: %d backends got batches", name, used)
		att, nslow := attainment(outs, slowed, slowed.Add(6*time.Second), 400*time.Millisecond)
		first, nfirst := attainment(outs, slowed, slowed.Add(time.Second), 400*time.Millisecond)
		sent := scrape(t, s.url, metrics.GatewayBatchesSentTotal)
		hedges := scrape(t, s.url, metrics.GatewayHedgesTotal)
		t.Logf("%s, %d backends: slowed %s; requests %d, failed %d; within SLO while slow %.3f%% of %d (first second %.3f%% of %d); batches %.0f, hedged %.0f (%.2f%%, won %.0f), hedge machine time %.3fs; %s slowness %.2f",
			name, n, s.victim.id, len(outs), failed, 100*att, nslow, 100*first, nfirst, sent, hedges, 100*hedges/max(sent, 1),
			scrape(t, s.url, metrics.GatewayHedgesTotal, `outcome="won"`), scrape(t, s.url, metrics.GatewayHedgeSecondsTotal),
			s.victim.id, scrape(t, s.url, metrics.GatewayBackendSlowness, `backend="`+s.victim.id+`"`))
		if float64(failed) > 0.01*float64(len(outs)) {
			t.Errorf("%s: %d of %d failed; want ≤ 1%%", name, failed, len(outs))
		}
	}
}
