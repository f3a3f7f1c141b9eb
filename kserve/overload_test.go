package kserve

import (
	"context"
	"fmt"
	"math"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
)

// busy is a scheduler read of a saturated gateway: p90 delay d, its
// goroutines queued for its Ps.
func busy(d time.Duration) schedSample { return schedSample{delay: d, samples: 100, queued: true} }

func TestLimitController(t *testing.T) {
	const target = 2 * time.Millisecond
	newCtl := func() *limitController {
		return &limitController{target: target, min: 16, max: 1024, limit: 1024}
	}
	t.Run("a cut the next interval finds clear is undone; two in a row stay", func(t *testing.T) {
		c := newCtl()
		c.limit = 300
		if l := c.update(busy(5*time.Millisecond), 40); l != 20 {
			t.Fatalf("one interval at 2.5× the target, 40 in flight: limit %v, want 20 (the cut is prompt)", l)
		}
		if l := c.update(busy(100*time.Microsecond), 40); l != 300 {
			t.Fatalf("the next interval clear: limit %v, want the 300 before the cut (a hiccup)", l)
		}
		c.update(busy(5*time.Millisecond), 40)
		c.update(busy(5*time.Millisecond), 20)
		if l := c.update(busy(100*time.Microsecond), 20); l != 20 {
			t.Fatalf("clear after two intervals over the target: limit %v, want 20 (grown from the floor 16 by √16), not the 300 restored", l)
		}
	})
	t.Run("a cut followed by a nearly idle interval is undone", func(t *testing.T) {
		// The demo's paper-chain at 50 req/s, 40 in flight: one busy
		// interval (a re-plan beside the CPU backends), then intervals with
		// too few scheduling samples to read. The cut must not stand on
		// them: it refused every request over 20 in flight until a busier
		// interval came.
		c := newCtl()
		c.limit = 300
		c.update(busy(5*time.Millisecond), 40)
		if l := c.update(schedSample{delay: 5 * time.Millisecond, samples: minDelaySamples - 1, queued: true}, 40); l != 300 {
			t.Fatalf("a nearly idle interval after one cut: limit %v, want the 300 before the cut", l)
		}
		c.update(busy(5*time.Millisecond), 40)
		c.update(busy(5*time.Millisecond), 20)
		if l := c.update(schedSample{samples: 1}, 20); l != 16 {
			t.Fatalf("a nearly idle interval after two cuts: limit %v, want the cut kept at 16", l)
		}
	})
	t.Run("a cut stops at the calm floor of requests that wait, which a sustained overload forgets", func(t *testing.T) {
		// The demo's paper-chain: about 37 requests in flight at 50 req/s,
		// each waiting about 0.7 s on its batches, revised every 20 ms
		// under the target; then two intervals over it (a re-plan beside
		// the CPU backends).
		c := newCtl()
		c.limit = 300
		now := int64(0)
		step := func(s schedSample, inflight int64, entered uint64, shed bool) float64 {
			now += int64(20 * time.Millisecond)
			c.remember(s, doorInterval{now: now, elapsed: 0.02, inflight: inflight, entered: entered, shed: shed})
			return c.update(s, inflight)
		}
		for i := range 100 {
			step(busy(100*time.Microsecond), int64(30+i%8), 1, false) // 30..37 in flight, 50 req/s
		}
		step(busy(5*time.Millisecond), 37, 1, false)
		l := step(busy(5*time.Millisecond), 37, 1, false)
		if want := 37 + math.Sqrt(37); l != want {
			t.Fatalf("two intervals over the target after calm ones with up to 37 in flight: limit %v, want the floor %.1f (37 + √37), not 37×0.4 = 14.8", l, want)
		}
		// An interval the door refused in does not raise the floor: that
		// demand was cut off, not carried.
		step(busy(100*time.Microsecond), 200, 1, true)
		if f := c.floor(); f != 37+math.Sqrt(37) {
			t.Fatalf("after an interval with 200 in flight and refusals: floor %v, want it still 37 + √37", f)
		}
		// A sustained overload: no calm interval for two windows.
		for range 2 * int(calmWindow/int64(20*time.Millisecond)) {
			l = step(busy(10*time.Millisecond), int64(l), 100, true)
		}
		if l != 16 || c.floor() != 16 {
			t.Fatalf("after %v over the target: limit %v, floor %v; want both at the min 16", 2*time.Duration(calmWindow), l, c.floor())
		}
	})
	t.Run("no floor from requests that come back at once", func(t *testing.T) {
		// 128 closed-loop connections on a 50 ms session: 128 in flight,
		// 10,000 req/s (12.8 ms each), calm until the gateway saturates.
		c := newCtl()
		c.limit = 300
		now := int64(0)
		for range 50 {
			now += int64(20 * time.Millisecond)
			c.remember(busy(100*time.Microsecond), doorInterval{now: now, elapsed: 0.02, inflight: 128, entered: 200})
			c.update(busy(100*time.Microsecond), 128)
		}
		if f := c.floor(); f != 16 {
			t.Fatalf("calm at 128 in flight, 12.8 ms each: floor %v, want the min 16 (they are the load that saturates the gateway)", f)
		}
		now += int64(20 * time.Millisecond)
		c.remember(busy(8*time.Millisecond), doorInterval{now: now, elapsed: 0.02, inflight: 128, entered: 200})
		if l := c.update(busy(8*time.Millisecond), 128); l != 64 {
			t.Fatalf("over the target at 128 in flight: limit %v, want 64 (halved)", l)
		}
	})
	t.Run("shrinks under queueing delay, to min", func(t *testing.T) {
		c := newCtl()
		inflight := int64(512)
		prev := c.update(busy(10*time.Millisecond), inflight)
		if prev != 256 { // min(1024, 512) × max(0.5, 2/10)
			t.Fatalf("first revision at 512 in flight, delay 5× target: limit %v, want 256", prev)
		}
		for i := 0; i < 20; i++ {
			l := c.update(busy(10*time.Millisecond), int64(prev))
			if l > prev {
				t.Fatalf("revision %d: limit grew from %v to %v under delay", i, prev, l)
			}
			prev = l
		}
		if prev != 16 {
			t.Fatalf("after 20 revisions under delay: limit %v, want the min 16", prev)
		}
	})
	t.Run("shrinks gently just over the target", func(t *testing.T) {
		c := newCtl()
		l := c.update(busy(target*5/4), 1000)
		if want := 1000.0 * 0.8; l != want {
			t.Fatalf("delay 1.25× target: limit %v, want %v", l, want)
		}
	})
	t.Run("grows back when the delay clears", func(t *testing.T) {
		c := newCtl()
		c.limit = 16
		prev, steps := 16.0, 0
		for prev < 1024 {
			l := c.update(busy(100*time.Microsecond), int64(prev)) // the limit in use
			if l <= prev {
				t.Fatalf("step %d: limit %v did not grow from %v with the delay under the target", steps, l, prev)
			}
			prev, steps = l, steps+1
			if steps > 100 {
				t.Fatalf("limit %v after 100 clear revisions, want the max 1024", prev)
			}
		}
		if prev != 1024 {
			t.Fatalf("limit %v, want it capped at the max 1024", prev)
		}
		t.Logf("16 → 1024 in %d revisions", steps)
	})
	for _, tc := range []struct {
		name     string
		s        schedSample
		inflight int64
	}{
		{"another process's load: delay without our goroutines queued", schedSample{delay: 50 * time.Millisecond, samples: 100}, 512},
		{"too few samples to tell", schedSample{delay: 50 * time.Millisecond, samples: minDelaySamples - 1, queued: true}, 512},
		{"clear but the limit unused", busy(100 * time.Microsecond), 100},
	} {
		t.Run("holds: "+tc.name, func(t *testing.T) {
			c := newCtl()
			c.limit = 300
			if l := c.update(tc.s, tc.inflight); l != 300 {
				t.Fatalf("limit %v, want it held at 300", l)
			}
		})
	}
}

// TestMeanWaiting checks the queue signal on the intervals measured in the
// demo and at 512 connections (docs/traffic.md, "Overload control"): what
// the door calls queued is at least GOMAXPROCS goroutines waiting for a P on
// average, by Little's law over the interval (2 on the 2-core host measured).
func TestMeanWaiting(t *testing.T) {
	// Buckets in seconds, as the runtime's: 0–1 ms, 1–2 ms, 2–4 ms, 4 ms–∞.
	buckets := []float64{math.Inf(-1), 0, 0.001, 0.002, 0.004, math.Inf(1)}
	const procs = 2 // the threshold on the 2-core host measured
	for _, tc := range []struct {
		name    string
		counts  []uint64
		elapsed float64
		want    float64
		queued  bool
	}{
		// 9 wake-ups in 30 ms, two of them 1–4 ms late: a p90 of 2–4 ms,
		// and yet 0.27 waiting on average, a hiccup.
		{"the demo: few samples, one late", []uint64{0, 7, 1, 1, 0}, 0.030, (7*0.0005 + 0.0015 + 0.003) / 0.030, false},
		// 90 in 20 ms, most 1–4 ms late: 10.75 waiting.
		{"512 connections", []uint64{0, 10, 20, 60, 0}, 0.020, (10*0.0005 + 20*0.0015 + 60*0.003) / 0.020, true},
		{"the unbounded bucket counts at its lower bound", []uint64{0, 0, 0, 0, 5}, 0.010, 5 * 0.004 / 0.010, true},
		{"no time elapsed", []uint64{0, 1, 0, 0, 0}, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := meanWaiting(buckets, tc.counts, tc.elapsed)
			if math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("mean waiting %v, want %v", got, tc.want)
			}
			if (got >= procs) != tc.queued {
				t.Fatalf("mean waiting %v against GOMAXPROCS %d: queued %v, want %v", got, procs, got >= procs, tc.queued)
			}
		})
	}
}

// scripted is a delaySignal that returns what the test set.
type scripted struct{ s schedSample }

func (f *scripted) read(int64) schedSample { return f.s }

func TestDoorShedsAndRecovers(t *testing.T) {
	sig := &scripted{}
	o, err := (&OverloadOptions{Interval: 10 * time.Millisecond, MinLimit: 4, MaxLimit: 8}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	d := newDoor(o, sig)
	ms := int64(time.Millisecond)
	now := int64(1000 * ms) // a fake clock, in unix ns
	for i := 0; i < 8; i++ {
		if !d.enter(now) {
			t.Fatalf("request %d refused under the limit 8", i+1)
		}
	}
	if d.enter(now) {
		t.Fatal("9th request in flight admitted over the limit 8")
	}
	// The gateway saturates: the next revision halves the limit.
	sig.s = busy(20 * time.Millisecond)
	now += 10 * ms
	if d.enter(now) {
		t.Fatal("request admitted with 8 in flight after the limit shrank")
	}
	if st := d.stats(); st.Limit != 4 || st.InFlight != 8 || st.Shed != 2 || st.Delay != 20*time.Millisecond {
		t.Fatalf("stats %+v, want limit 4, 8 in flight, 2 shed, delay 20ms", st)
	}
	for i := 0; i < 5; i++ {
		d.exit()
	}
	// 3 in flight under the limit 4: one more goes in, and the tap agrees.
	now += ms // within the interval: no revision
	if !d.enter(now) {
		t.Fatal("request refused with 3 in flight under the limit 4")
	}
	if !d.full(now) {
		t.Fatal("tap: not full with 4 in flight at the limit 4")
	}
	// The delay clears; the limit is in use, so it grows back to the max.
	sig.s = busy(50 * time.Microsecond)
	for i := 0; i < 10; i++ {
		now += 10 * ms
		d.full(now)
	}
	if st := d.stats(); st.Limit != 8 {
		t.Fatalf("limit %d after the delay cleared, want the max 8", st.Limit)
	}
	if d.full(now) {
		t.Fatal("tap: full with 4 in flight under the limit 8")
	}
}

func TestOverloadOptionsRefused(t *testing.T) {
	for _, o := range []OverloadOptions{{MinLimit: 10, MaxLimit: 5}, {TargetDelay: -time.Second}, {MinLimit: -1}, {Hold: -time.Second}} {
		if _, err := o.withDefaults(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// TestDoorLive holds 8 infer requests in flight over HTTP (the door's limit,
// its signal scripted so that the host's load cannot move it), floods the
// HTTP and gRPC servers with 64 more at once, and checks that every one of
// those is shed before decoding — 429 with Retry-After and the JSON error,
// gRPC RESOURCE_EXHAUSTED with RetryInfo — that the 8 are answered 200 once
// released, and that a lone request after the flood is answered 200 on both.
func TestDoorLive(t *testing.T) {
	gate := make(chan struct{})
	const limit = 8
	srv := doorServer(t, func(in []api.Tensor) ([]api.Tensor, error) { <-gate; return in, nil }, OverloadOptions{MinLimit: limit, MaxLimit: limit})
	srv.door.sig = &scripted{} // no samples: the limit stays at 8
	addr := serveHTTP(t, srv)
	conn := serveGRPC(t, srv)
	released := false
	t.Cleanup(func() { // before the servers' (cleanups run last first): the calls held at the gate end
		if !released {
			close(gate)
		}
	})
	url := "http://" + addr + "/v2/models/echo/infer"
	client := &fasthttp.Client{MaxConnsPerHost: 256}
	post := func() (int, string, string, error) {
		a, err := postGood(client, url)
		return a.code, a.retryAfter, a.body, err
	}
	gc := inference.NewGRPCInferenceServiceClient(conn)
	call := func() error {
		_, err := gc.ModelInfer(context.Background(), &inference.ModelInferRequest{ModelName: "echo",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 1}}},
			RawInputContents: [][]byte{gatewaytest.FP32(1)}})
		return err
	}

	held := make(chan int, limit)
	for i := 0; i < limit; i++ {
		go func() {
			code, _, _, err := post()
			if err != nil {
				code = -1
			}
			held <- code
		}()
	}
	for deadline := time.Now().Add(30 * time.Second); srv.OverloadStats().InFlight < limit; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("door %+v: the %d held requests did not all get in", srv.OverloadStats(), limit)
		}
	}

	const flood = 64
	var mu sync.Mutex
	var bad []string
	var wg sync.WaitGroup
	for i := 0; i < flood; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			code, retry, body, err := post()
			if err != nil || code != 429 || retry != "1" || !strings.Contains(body, `{"error":"overloaded`) {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("HTTP %d, Retry-After %q, body %s, error %v", code, retry, body, err))
				mu.Unlock()
			}
		}()
		go func() {
			defer wg.Done()
			err := call()
			if st := status.Convert(err); st.Code() != codes.ResourceExhausted || retryDelay(st) != time.Second {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("gRPC %v", err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d of %d requests over the limit not shed as 429 + Retry-After 1 or RESOURCE_EXHAUSTED + RetryInfo 1s, e.g. %s", len(bad), 2*flood, bad[0])
	}
	if st := srv.OverloadStats(); st.Shed != 2*flood || st.InFlight != limit {
		t.Fatalf("door %+v: want %d shed, %d in flight", st, 2*flood, limit)
	}
	// No request of "echo" was answered yet, so none is counted by session.
	if st := srv.OverloadStats(); st.ShedUnnamed != 2*flood || st.ShedBySession != nil {
		t.Fatalf("door %+v: want all %d shed unnamed (no session answered yet)", st, 2*flood)
	}
	close(gate)
	released = true
	for i := 0; i < limit; i++ {
		if code := <-held; code != 200 {
			t.Fatalf("a held request answered %d once released, want 200", code)
		}
	}
	if code, _, body, err := post(); err != nil || code != 200 {
		t.Fatalf("lone HTTP request after the flood: %d %s %v, want 200", code, body, err)
	}
	if err := call(); err != nil {
		t.Fatalf("lone gRPC call after the flood: %v", err)
	}
	if st := srv.OverloadStats(); st.InFlight != 0 {
		t.Fatalf("door %+v after every answer: want 0 in flight", st)
	}
}

// The door counts an HTTP refusal by the session its path names, once that
// session has been answered (it is in the statistics table), and never
// for a name the gateway does not serve: a client cannot grow the table.
func TestCountShedBySession(t *testing.T) {
	exec, err := gateway.NewDAGRunner(gatewaytest.NewFakeRunner(), gatewaytest.SessionsFromYAML(t, serverSessions))
	if err != nil {
		t.Fatal(err)
	}
	var st stats
	if st.countShed([]byte("/v2/models/echo/infer")) {
		t.Fatal("counted for a session not answered yet")
	}
	if st.of(exec, "echo") == nil {
		t.Fatal("the served session echo has no statistics")
	}
	for _, p := range []string{"/v2/models/echo/infer", "/v2/models/echo/versions/1/infer", "/v2/models/echo"} {
		if !st.countShed([]byte(p)) {
			t.Errorf("%s: not counted for echo", p)
		}
	}
	for _, p := range []string{"/v2/models/nope/infer", "/v2/models//infer", "/v2/models/", "/v2/health/ready"} {
		if st.countShed([]byte(p)) {
			t.Errorf("%s: counted for a session", p)
		}
	}
	if got := st.shedBySession(); len(got) != 1 || got["echo"] != 3 {
		t.Errorf("shed by session %v, want echo 3", got)
	}
	if st.of(exec, "nope") != nil || len(*st.table.Load()) != 1 {
		t.Error("the table grew for a session the gateway does not serve")
	}
	path := []byte("/v2/models/echo/infer")
	if n := testing.AllocsPerRun(100, func() { st.countShed(path) }); n != 0 {
		t.Errorf("countShed allocates %v times a call, want 0", n)
	}
}

func retryDelay(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

// BenchmarkHandleHTTPDoor is BenchmarkHandleHTTP with the door on (its
// defaults, the runtime's scheduler as its signal): the door's cost per
// request is the difference.
func BenchmarkHandleHTTPDoor(b *testing.B) {
	srv := echoServer(b)
	o, err := (&OverloadOptions{}).withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	srv.door = newDoor(o, newSchedDelay())
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.SetRequestURI("/v2/models/echo/infer")
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetBody(benchBody)
		srv.HandleHTTP(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}

// TestSchedDelaySignal reads the production signal while 3×GOMAXPROCS
// goroutines spin and 32 sleep in short steps: the runtime reports goroutines
// queued for the Ps and a p90 scheduling delay over the default target (a
// woken sleeper waits out a spinner's time slice), and the door's limit
// drops to its floor at its next revision. Three spinners a P, so that two a
// P wait on average: with two (one waiting a P) the mean sat at the
// threshold, GOMAXPROCS waiting, and the door's intervals fell either side.
func TestSchedDelaySignal(t *testing.T) {
	sig := newSchedDelay()
	// Intervals of 500 ms: the sleepers' samples come slowly (a gateway's
	// requests make many more).
	o, err := (&OverloadOptions{Interval: 500 * time.Millisecond}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	d := newDoor(o, sig)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := 0; i < 3*runtime.GOMAXPROCS(0); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := 0; !stop.Load(); x++ {
			}
		}()
	}
	// Goroutines woken by timers: each wake-up is a scheduling sample, and
	// each waits for a spinner's time slice to end.
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				time.Sleep(100 * time.Microsecond)
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	var last schedSample
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(o.Interval) {
		if time.Now().After(deadline) {
			t.Fatalf("spinning goroutines: last read %+v; want ≥ %d samples, delay over %v, queued", last, minDelaySamples, o.TargetDelay)
		}
		if last = sig.read(time.Now().UnixNano()); last.samples >= minDelaySamples && last.delay > o.TargetDelay && last.queued {
			break
		}
	}
	t.Logf("spinning: %+v", last)
	sig.read(time.Now().UnixNano()) // start the door's next interval from here
	for deadline := time.Now().Add(20 * time.Second); d.stats().Limit != int64(o.MinLimit); time.Sleep(o.Interval / 5) {
		if time.Now().After(deadline) {
			t.Fatalf("door %+v under spinning goroutines: want the limit at its floor %d", d.stats(), o.MinLimit)
		}
		d.enter(time.Now().UnixNano())
		d.exit()
	}
}

// TestDoorHoldsARetryThatIgnoredRetryAfter: with a hold, a connection's
// first refusal is answered at once and its next one, sent without waiting
// the Retry-After it was told, is held for the hold before its 429; another
// connection's first refusal is not held.
func TestDoorHoldsARetryThatIgnoredRetryAfter(t *testing.T) {
	gate := make(chan struct{})
	const hold = 300 * time.Millisecond
	srv := doorServer(t, func(in []api.Tensor) ([]api.Tensor, error) { <-gate; return in, nil }, OverloadOptions{MinLimit: 1, MaxLimit: 1, Hold: hold})
	addr := startHTTPDoor(t, srv)
	url := "http://" + addr + "/v2/models/echo/infer"
	conn := func() *fasthttp.HostClient { return &fasthttp.HostClient{Addr: addr, MaxConns: 1} }
	post := func(c *fasthttp.HostClient) (int, time.Duration) { return postOn(t, c, url) }
	released := false
	t.Cleanup(func() {
		if !released {
			close(gate)
		}
	})
	inside := make(chan int, 1)
	go func() { code, _ := post(conn()); inside <- code }()
	for deadline := time.Now().Add(30 * time.Second); srv.OverloadStats().InFlight < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("door %+v: the first request did not get in", srv.OverloadStats())
		}
	}
	a, b := conn(), conn()
	if code, _ := post(a); code != 429 || srv.OverloadStats().Held != 0 {
		t.Fatalf("connection a's first request: HTTP %d, %d held; want 429 answered at once", code, srv.OverloadStats().Held)
	}
	if code, took := post(a); code != 429 || srv.OverloadStats().Held != 1 || took < hold {
		t.Fatalf("connection a again at once: HTTP %d after %v, %d held; want 429 held %v", code, took, srv.OverloadStats().Held, hold)
	}
	if code, _ := post(b); code != 429 || srv.OverloadStats().Held != 1 {
		t.Fatalf("connection b's first request: HTTP %d, %d held in all; want 429 answered at once (still 1 held)", code, srv.OverloadStats().Held)
	}
	close(gate)
	released = true
	if code := <-inside; code != 200 {
		t.Fatalf("the request inside answered %d once released, want 200", code)
	}
	if code, _ := post(a); code != 200 || srv.OverloadStats().Held != 1 {
		t.Fatalf("connection a after the flood: HTTP %d, %d held in all; want 200, nothing more held", code, srv.OverloadStats().Held)
	}
}

// TestAdmissionRefusalHeldWhenRepeated: admission's 429 (after decoding) is
// held as the door's is: a connection refused again at once waits the hold.
func TestAdmissionRefusalHeldWhenRepeated(t *testing.T) {
	const hold = 300 * time.Millisecond
	srv := doorServer(t, func(in []api.Tensor) ([]api.Tensor, error) {
		return nil, fmt.Errorf("%w: module e at the current load", gateway.ErrOverloaded)
	}, OverloadOptions{Hold: hold})
	addr := startHTTPDoor(t, srv)
	url := "http://" + addr + "/v2/models/echo/infer"
	c := &fasthttp.HostClient{Addr: addr, MaxConns: 1}
	post := func() (int, time.Duration) { return postOn(t, c, url) }
	if code, _ := post(); code != 429 || srv.OverloadStats().Held != 0 {
		t.Fatalf("first refusal: HTTP %d, %d held; want 429 answered at once", code, srv.OverloadStats().Held)
	}
	if code, took := post(); code != 429 || srv.OverloadStats().Held != 1 || took < hold {
		t.Fatalf("refused again at once: HTTP %d after %v, %d held; want 429 held %v", code, took, srv.OverloadStats().Held, hold)
	}
	if st := srv.OverloadStats(); st.Shed != 0 || st.InFlight != 0 {
		t.Fatalf("door %+v: want nothing shed by the door (admission refused) and nothing in flight", st)
	}
}

// The same over gRPC: a ModelInfer call admission refuses (429,
// RESOURCE_EXHAUSTED) on a connection refused less than the Retry-After ago
// is held before its status is sent, on the call's own goroutine; the
// first is answered at once. A refusal that is not a 429 (the bad input of
// an unknown session here, NOT_FOUND) is never held, repeated or not.
func TestAdmissionRefusalHeldWhenRepeatedGRPC(t *testing.T) {
	const hold = 300 * time.Millisecond
	srv := doorServer(t, func(in []api.Tensor) ([]api.Tensor, error) {
		return nil, fmt.Errorf("%w: module e at the current load", gateway.ErrOverloaded)
	}, OverloadOptions{Hold: hold})
	srv.door.sig = &scripted{}
	gc := inference.NewGRPCInferenceServiceClient(serveGRPC(t, srv))
	call := func(model string) (codes.Code, time.Duration) {
		t0 := time.Now()
		_, err := gc.ModelInfer(context.Background(), &inference.ModelInferRequest{ModelName: model,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 1}}},
			RawInputContents: [][]byte{gatewaytest.FP32(1)}})
		return status.Code(err), time.Since(t0)
	}
	for range 2 {
		if code, _ := call("nosuch"); code != codes.NotFound || srv.OverloadStats().Held != 0 {
			t.Fatalf("unknown session: %v, %d held; want NotFound, never held", code, srv.OverloadStats().Held)
		}
	}
	if code, _ := call("echo"); code != codes.ResourceExhausted || srv.OverloadStats().Held != 0 {
		t.Fatalf("first refusal: %v, %d held; want RESOURCE_EXHAUSTED answered at once", code, srv.OverloadStats().Held)
	}
	if code, took := call("echo"); code != codes.ResourceExhausted || srv.OverloadStats().Held != 1 || took < hold {
		t.Fatalf("refused again at once: %v after %v, %d held; want RESOURCE_EXHAUSTED held %v", code, took, srv.OverloadStats().Held, hold)
	}
	if st := srv.OverloadStats(); st.Shed != 0 || st.InFlight != 0 {
		t.Fatalf("door %+v: want nothing shed by the door (admission refused) and nothing in flight", st)
	}
}

// serveGRPC serves srv's gRPC API on loopback until the test ends and
// returns a client connection to it (kservetest.ServeGRPC's, which this
// package's tests cannot import: it imports kserve).
func serveGRPC(t *testing.T, srv *Server) *grpc.ClientConn {
	t.Helper()
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := srv.NewGRPCServer()
	go gs.Serve(gl)
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop() })
	return conn
}

// startHTTPDoor serves srv's HTTP API on loopback, its door's signal
// scripted with no samples (the limit stays where it is), until the test
// ends, and returns its address.
func startHTTPDoor(t *testing.T, srv *Server) string {
	t.Helper()
	srv.door.sig = &scripted{}
	return serveHTTP(t, srv)
}

// serveHTTP serves srv's HTTP API on loopback until the test ends and
// returns its address (kservetest.ServeHTTP's, which this package's tests
// cannot import: it imports kserve).
func serveHTTP(t *testing.T, srv *Server) string {
	t.Helper()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.NewHTTPServer()
	go hs.Serve(hl)
	t.Cleanup(func() { hs.Shutdown() })
	return hl.Addr().String()
}

// postOn posts goodBody to url on c (one connection when c.MaxConns is 1)
// and returns the status and how long the answer took.
func postOn(t *testing.T, c *fasthttp.HostClient, url string) (int, time.Duration) {
	t.Helper()
	a, err := postGood(c, url)
	if err != nil {
		t.Fatal(err)
	}
	return a.code, a.took
}

// answer is what postGood got back.
type answer struct {
	code             int
	retryAfter, body string
	took             time.Duration
}

// postGood posts goodBody to url on c and returns the answer; an error
// rather than a test failure, so that goroutines may call it.
func postGood(c interface {
	DoTimeout(*fasthttp.Request, *fasthttp.Response, time.Duration) error
}, url string) (answer, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url)
	req.Header.SetMethod("POST")
	req.Header.SetContentType("application/json")
	req.SetBodyString(goodBody)
	t0 := time.Now()
	if err := c.DoTimeout(req, resp, 30*time.Second); err != nil {
		return answer{}, err
	}
	return answer{resp.StatusCode(), string(resp.Header.Peek("Retry-After")), string(resp.Body()), time.Since(t0)}, nil
}

// doorServer is a Server of serverSessions whose module e runs fn, with the
// door o.
func doorServer(t *testing.T, fn func([]api.Tensor) ([]api.Tensor, error), o OverloadOptions) *Server {
	t.Helper()
	f := gatewaytest.NewFakeRunner()
	f.Fn["e"] = fn
	exec, err := gateway.NewDAGRunner(f, gatewaytest.SessionsFromYAML(t, serverSessions))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(exec, ServerOptions{Overload: &o})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}
