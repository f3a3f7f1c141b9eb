package kserve

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"
)

// OverloadOptions configures the door: the gateway's own overload control
// (docs/traffic.md, "Overload control"). Infer requests beyond an adaptive
// limit on the requests in flight are refused before their body is decoded:
// HTTP 429 with Retry-After, gRPC RESOURCE_EXHAUSTED with a RetryInfo detail.
// The limit follows the gateway's scheduling delay — how long its goroutines
// wait for a CPU (the Go runtime's /sched/latencies:seconds, p90 over each
// interval) — shrinking when that delay is over TargetDelay while the
// gateway's own goroutines queue for its Ps (on average over the interval,
// at least GOMAXPROCS of them waiting: the gateway is the one short of CPU,
// not another process on the host), and growing back otherwise. Requests
// that wait without a CPU (a batch filling, a backend computing) cost
// nothing here: they raise neither signal. Zero fields take the defaults
// below.
type OverloadOptions struct {
	// TargetDelay is the scheduling delay (p90 over one interval) the door
	// holds the gateway to. Default DefaultOverloadTargetDelay.
	TargetDelay time.Duration
	// Interval is how often the limit is revised, at most (a revision happens
	// on the first request after it has passed). Default 20 ms.
	Interval time.Duration
	// MinLimit and MaxLimit bound the limit on infer requests in flight; a
	// request that finds fewer than MinLimit in flight is always let in.
	// Defaults DefaultOverloadMinLimit and 8192.
	MinLimit, MaxLimit int
	// RetryAfter is what a refused request is told to wait: HTTP Retry-After
	// (whole seconds, at least 1) and gRPC's RetryInfo. Default 1 s.
	RetryAfter time.Duration
	// Hold delays an HTTP refusal (the door's 429, and admission's and a
	// tenant limit's 429 after decoding) by this long before it is answered
	// (0: never) when its connection was refused before, less than
	// RetryAfter ago: the client did not wait as it was told. At most MaxLimit
	// refusals are held at a time (beyond that, answered at once). A
	// closed-loop client that retries at once (hey, most load generators)
	// otherwise turns the door's own refusals into the gateway's CPU load,
	// thousands a second at 512 connections; a held refusal costs a parked
	// goroutine, no CPU. A connection's first refusal is answered at once.
	// Over gRPC the same holds for a ModelInfer call refused 429 after its
	// message was read (admission's, a tenant limit's), the connection told
	// by its peer's address; the door's own refusals, in the tap, are never
	// held: the tap runs on the connection's reader.
	// `piccolo gateway` holds DefaultOverloadHold (--overload-hold;
	// docs/traffic.md, "Holding the refusal").
	Hold time.Duration
}

// DefaultOverloadHold is `piccolo gateway`'s hold of a repeated refusal at
// the door (--overload-hold): a connection that retries at once sends a few
// refusals a second instead of hundreds, and the hold is short beside the
// 1 s Retry-After it was told.
const DefaultOverloadHold = 200 * time.Millisecond

// DefaultOverloadTargetDelay is the default scheduling delay the door holds:
// far below any SLO a session has (tens of ms and more), far above what an
// unsaturated host shows (tens of µs).
const DefaultOverloadTargetDelay = 2 * time.Millisecond

// DefaultOverloadMinLimit is the default floor of the door's limit.
const DefaultOverloadMinLimit = 16

func (o OverloadOptions) withDefaults() (OverloadOptions, error) {
	if o.TargetDelay == 0 {
		o.TargetDelay = DefaultOverloadTargetDelay
	}
	if o.Interval == 0 {
		o.Interval = 20 * time.Millisecond
	}
	if o.MinLimit == 0 {
		o.MinLimit = DefaultOverloadMinLimit
	}
	if o.MaxLimit == 0 {
		o.MaxLimit = 8192
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = time.Second
	}
	switch {
	case o.TargetDelay < 0, o.Interval < 0, o.RetryAfter < 0, o.Hold < 0:
		return o, fmt.Errorf("kserve: overload: target delay %v, interval %v, retry-after %v and hold %v must not be negative", o.TargetDelay, o.Interval, o.RetryAfter, o.Hold)
	case o.MinLimit < 1 || o.MaxLimit < o.MinLimit:
		return o, fmt.Errorf("kserve: overload: limits %d..%d: want 1 ≤ min ≤ max", o.MinLimit, o.MaxLimit)
	}
	return o, nil
}

// OverloadStats is the door's state: the limit on infer requests in flight,
// those in flight now, the requests it refused since the start, and the
// latest scheduling delay it measured (p90 over the latest interval that had
// samples).
type OverloadStats struct {
	Limit, InFlight int64
	Shed            uint64
	// ShedBySession are the HTTP infer requests of Shed whose session the
	// door read from the path (a session answered before; nil: none);
	// ShedUnnamed the others: gRPC calls, refused before their message names
	// a session, and a session's requests before its first answer. Each is
	// a counter of its own, so none decreases between two reads.
	ShedBySession map[string]uint64
	ShedUnnamed   uint64
	Delay         time.Duration
	// Held counts the refusals held before they were answered
	// (OverloadOptions.Hold), since the start.
	Held uint64
	// Floor is the lowest a cut may take the limit now (the calm floor:
	// limitController.floor), as of the latest revision.
	Floor int64
}

// door is the request path's side of the overload control: one atomic add
// when a request enters and one when it leaves, a load of the limit and of
// the next revision time. The revision itself (reading the runtime's
// histogram, the AIMD step) runs at most once an interval, on the request
// that finds the interval over and wins the TryLock; the others do not wait.
// There is no goroutine of its own, so a Server needs no Close.
//
// Why our own code: the libraries that do this (Netflix's concurrency-limits,
// Envoy's adaptive concurrency filter) are Java and C++; the Go ports are
// RTT-driven limiters, and RTT here is mostly batching and the backends,
// which say nothing about the gateway's own CPU.
type door struct {
	inflight atomic.Int64
	entered  atomic.Uint64 // requests let in since the start
	limit    atomic.Int64
	next     atomic.Int64 // unix ns of the next revision
	shed     atomic.Uint64
	unnamed  atomic.Uint64 // of shed, those no session was counted for (OverloadStats.ShedUnnamed)
	delay    atomic.Int64  // ns, the latest measured
	floor    atomic.Int64  // the calm floor at the latest revision
	held     atomic.Int64  // refusals being held (OverloadOptions.Hold), HTTP and gRPC
	heldAll  atomic.Uint64 // refusals held since the start
	refused  [refusedSlots]refusedConn

	mu  sync.Mutex // the revision; TryLock only
	ctl limitController
	sig delaySignal
	// shed and entered at the previous revision, and when it was (unix ns);
	// under mu
	shedSeen, enteredSeen uint64
	revised               int64

	interval    int64 // ns
	hold        time.Duration
	maxHeld     int64
	retryAfter  int64 // ns
	httpBody    []byte
	retryHeader string
	grpcErr     error
}

// delaySignal reads the scheduling delay since its last read; now is the
// revision's clock (unix ns), so the signal does not read it again.
type delaySignal interface {
	read(now int64) schedSample
}

// schedSample is one read of the scheduler: the delay quantile over the
// samples recorded since the previous read, and whether the process's
// goroutines queued for its Ps over that time (schedDelay.read).
type schedSample struct {
	delay   time.Duration
	samples uint64
	queued  bool
}

func newDoor(o OverloadOptions, sig delaySignal) *door {
	d := &door{
		ctl:        limitController{target: o.TargetDelay, min: float64(o.MinLimit), max: float64(o.MaxLimit), limit: float64(o.MaxLimit)},
		sig:        sig,
		interval:   int64(o.Interval),
		hold:       o.Hold,
		maxHeld:    int64(o.MaxLimit),
		retryAfter: int64(o.RetryAfter),
	}
	d.limit.Store(int64(o.MaxLimit))
	secs := max(1, int64(math.Ceil(o.RetryAfter.Seconds())))
	d.retryHeader = fmt.Sprint(secs)
	d.httpBody = fmt.Appendf(nil, `{"error":"overloaded: the gateway is at its limit of requests in flight, its CPU saturated; retry after %d s"}`, secs)
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("overloaded: the gateway is at its limit of requests in flight, its CPU saturated; retry after %d s", secs))
	if ds, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(o.RetryAfter)}); err == nil {
		st = ds
	}
	d.grpcErr = st.Err()
	return d
}

// enter counts a request in, at now (unix ns), unless the limit is reached:
// then it counts it as shed and returns false.
func (d *door) enter(now int64) bool {
	n := d.inflight.Add(1)
	if now >= d.next.Load() {
		d.revise(now)
	}
	if n > d.limit.Load() {
		d.inflight.Add(-1)
		d.shed.Add(1)
		return false
	}
	d.entered.Add(1)
	return true
}

// full reports whether a request arriving at now would be over the limit,
// counting nothing: the gRPC tap, which sees a call before its message is
// read, and ModelInfer counts it in (count) once decoded.
func (d *door) full(now int64) bool {
	if now >= d.next.Load() {
		d.revise(now)
	}
	if d.inflight.Load() >= d.limit.Load() {
		d.shed.Add(1)
		d.unnamed.Add(1)
		return true
	}
	return false
}

func (d *door) count() { d.inflight.Add(1); d.entered.Add(1) }
func (d *door) exit()  { d.inflight.Add(-1) }

func (d *door) revise(now int64) {
	if !d.mu.TryLock() {
		return
	}
	defer d.mu.Unlock()
	if now < d.next.Load() {
		return
	}
	s := d.sig.read(now)
	if s.samples >= minDelaySamples {
		d.delay.Store(int64(s.delay))
	}
	inflight, shed, entered := d.inflight.Load(), d.shed.Load(), d.entered.Load()
	elapsed := min(now-d.revised, 2*d.interval)
	d.ctl.remember(s, doorInterval{now: now, elapsed: float64(elapsed) / 1e9, inflight: inflight, entered: entered - d.enteredSeen, shed: shed != d.shedSeen})
	d.shedSeen, d.enteredSeen, d.revised = shed, entered, now
	d.limit.Store(int64(d.ctl.update(s, inflight)))
	d.floor.Store(int64(d.ctl.floor()))
	d.next.Store(now + d.interval)
}

func (d *door) stats() OverloadStats {
	return OverloadStats{Limit: d.limit.Load(), InFlight: d.inflight.Load(), Shed: d.shed.Load(), Delay: time.Duration(d.delay.Load()), Held: d.heldAll.Load(), Floor: d.floor.Load()}
}

// shedHTTP answers a refused HTTP request: 429, Retry-After, a JSON error.
// Nothing of it allocates.
func (d *door) shedHTTP(ctx *fasthttp.RequestCtx) {
	d.holdRepeated(ctx)
	ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
	ctx.SetContentTypeBytes(jsonType)
	ctx.Response.Header.Set("Retry-After", d.retryHeader)
	ctx.SetBody(d.httpBody)
}

// holdRepeated holds a refusal (the door's, or admission's 429 after
// decoding) for the hold when its connection was refused less than the
// Retry-After ago (OverloadOptions.Hold); it returns at once otherwise. It
// runs on the request's goroutine, after the door has counted the request
// out, before the response is written.
func (d *door) holdRepeated(ctx *fasthttp.RequestCtx) {
	if d.hold > 0 {
		d.holdIfAgain(ctx.ConnID(), ctx.Time().UnixNano())
	}
}

// holdIfAgain records a refusal of conn at now and, when conn was refused
// less than the Retry-After ago, sleeps the hold on the caller's goroutine
// (at most maxHeld at a time; beyond that, answered at once). HTTP's and
// gRPC's holds share it and its counters.
func (d *door) holdIfAgain(conn uint64, now int64) {
	if !d.again(conn, now) {
		return
	}
	if d.held.Add(1) <= d.maxHeld {
		d.heldAll.Add(1)
		time.Sleep(d.hold)
	}
	d.held.Add(-1)
}

// holdRepeatedGRPC is holdRepeated for a ModelInfer call answered *status
// (its HTTP equivalent): a 429 (admission's, a tenant limit's; not a
// message over the size limit, which gRPC also answers RESOURCE_EXHAUSTED)
// on a connection refused less than the Retry-After ago is held before its
// status is sent. Called deferred after the door's exit, on the call's own
// goroutine: the connection's other streams go on. The connection is told
// by the peer's address (peerKey); the door's own refusals, in the tap, are
// never held (it runs on the connection's reader).
func (d *door) holdRepeatedGRPC(ctx context.Context, status *int) {
	if d.hold > 0 && *status == http.StatusTooManyRequests {
		d.holdIfAgain(peerKey(ctx), time.Now().UnixNano())
	}
}

// peerKey is a gRPC call's connection as a key of the refusal table: its
// peer's IP and port, FNV-1a mixed, top bit set (HTTP's keys are fasthttp's
// connection ids, counted from 1: the two rarely share a slot, and sharing
// one costs a missed or an extra hold). No allocation.
func peerKey(ctx context.Context) uint64 {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return 1 << 63
	}
	a, ok := p.Addr.(*net.TCPAddr)
	if !ok {
		return 1 << 63
	}
	h := uint64(14695981039346656037)
	for _, b := range a.IP {
		h = (h ^ uint64(b)) * 1099511628211
	}
	h = (h ^ uint64(a.Port)) * 1099511628211
	return h | 1<<63
}

// refusedSlots is the size of the door's table of recent refusals by
// connection: a connection's slot is its id modulo this, so two
// connections sharing a slot overwrite each other (a refusal then answered
// at once), which costs nothing but a missed hold.
const refusedSlots = 4096

// refusedConn is one slot: the connection last refused there and when (unix
// ns). Two atomics, not one value: a torn read pairs one connection's id with
// another's time, again at worst a missed or an extra hold.
type refusedConn struct {
	conn atomic.Uint64
	at   atomic.Int64
}

// again records a refusal of conn at now and reports whether conn was
// refused before, less than the Retry-After ago.
func (d *door) again(conn uint64, now int64) bool {
	e := &d.refused[conn%refusedSlots]
	prev := e.conn.Swap(conn) == conn && now-e.at.Load() < d.retryAfter
	e.at.Store(now)
	return prev
}

// tap is the gRPC server's InTapHandle: it refuses ModelInfer calls while the
// door is full, before their message is read (grpc-go answers the call with
// the status, RetryInfo in grpc-status-details-bin).
func (d *door) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if info.FullMethodName != modelInferMethod || !d.full(time.Now().UnixNano()) {
		return ctx, nil
	}
	return nil, d.grpcErr
}

const modelInferMethod = "/inference.GRPCInferenceService/ModelInfer"

// minDelaySamples is the fewest scheduling samples an interval needs for
// its quantile to count; with fewer (a nearly idle gateway) the limit
// stays, or a single cut is undone (limitController).
const minDelaySamples = 8

// limitController is the rule on the limit, as Breakwater's credit pool
// (Cho et al., OSDI '20) and DAGOR (Zhou et al., SoCC '18) drive theirs from
// queueing delay rather than from latency: over the target with the
// gateway's goroutines queued, the limit drops to what is in flight times
// target/delay (at most halved an interval, as Netflix's Gradient2 clamps
// its gradient at 0.5), not below the calm floor (floor: what the gateway
// carried in flight calmly over the last second or two) nor min; over the target without them queued
// (another process's load), it stays; under the target, with the limit in
// use (at least half of it in flight), it grows by √limit (Gradient2's
// queue allowance), up to max. An interval with fewer than minDelaySamples samples
// leaves it. Not safe for concurrent use: the door's revision holds its
// lock.
//
// A cut that the very next interval finds under the target, or nearly idle
// (fewer than minDelaySamples samples), is undone: the limit goes back to
// what it was before it. One interval over the target is
// a hiccup (a GC cycle, a co-located CPU backend's batch); a saturated
// gateway stays over it for as long as its load lasts and keeps the cut.
// Growing back by √limit from half of what was in flight took 80 ms, and a
// session whose requests mostly wait on their batches had many more in
// flight than the cut limit: the demo's paper-chain, 37 in flight, lost 15
// requests to one 4.2 ms interval (docs/traffic.md, "Overload control").
// Cutting only after three intervals over the target (tried) kept those,
// but at 512 connections let 240–440 admitted requests a run go late; the
// undo leaves the first cut as prompt as before.
type limitController struct {
	target   time.Duration
	min, max float64
	limit    float64
	cuts     int     // intervals over the target, queued, in a row so far
	before   float64 // the limit before the first of them

	// The calm floor (remember, floor): the calm intervals of the current
	// window (calmNow, ending at calmEnd, unix ns) and of the one before.
	calmNow, calmPrev calmStats
	calmEnd           int64
}

// doorInterval is what the door counted over the interval a revision
// closes, for the calm floor.
type doorInterval struct {
	now      int64   // unix ns of the revision
	elapsed  float64 // seconds since the previous revision, at most two intervals
	inflight int64   // requests in flight at the revision
	entered  uint64  // requests let in since the previous revision
	shed     bool    // the door refused one since the previous revision
}

// calmStats sums a window's calm intervals: the most requests in flight at
// a revision, in flight × seconds, and the requests let in.
type calmStats struct {
	peak, area, entered float64
}

// floor is the stats' contribution to the calm floor: its peak when its
// requests stayed in flight at least floorWait on average (Little's law,
// area over entered), 0 otherwise.
func (w calmStats) floor() float64 {
	if w.area < floorWait.Seconds()*w.entered {
		return 0
	}
	return w.peak
}

// calmWindow is the length of one window of the calm floor: a concurrency
// the gateway carried calmly is a floor for at least this long after it was
// last seen, at most twice this.
const calmWindow = int64(time.Second)

// floorWait is the least mean time in flight of a calm window's requests for
// its concurrency to become a floor: requests that wait this long (for their
// batches, for backends) are let in at most peak/floorWait a second, which
// costs the gateway little CPU. Requests that come back within a few ms,
// hundreds of them in flight, are the load that saturates it, and must stay
// cuttable: at 128 closed-loop connections on the 50 ms burst session, a
// floor from them (tried) kept the limit at 139, and goodput fell to 3,547/s
// with 90 admitted requests late, against 9,967/s and none without it.
const floorWait = 200 * time.Millisecond

// remember records the interval a revision closes: calm when its scheduling
// delay was under the target or too sparse to read, and the door refused
// nothing over it (a refused demand was cut off, not carried). A sustained
// overload has no calm interval, and its floor is gone within two windows.
func (c *limitController) remember(s schedSample, iv doorInterval) {
	if iv.now >= c.calmEnd {
		c.calmPrev, c.calmNow = c.calmNow, calmStats{}
		if iv.now >= c.calmEnd+calmWindow {
			c.calmPrev = calmStats{} // a whole window passed without a revision
		}
		c.calmEnd = iv.now + calmWindow
	}
	if !iv.shed && (s.samples < minDelaySamples || s.delay <= c.target) {
		w := &c.calmNow
		w.peak = max(w.peak, float64(iv.inflight))
		w.area += float64(iv.inflight) * iv.elapsed
		w.entered += float64(iv.entered)
	}
}

// floor is the lowest a cut may take the limit: the calm floor, the most
// requests in flight at a calm interval's revision over the last one to two
// windows, of a window whose requests each stayed in flight floorWait or
// more, plus √ of it (Gradient2's queue allowance: the peaks between two
// revisions), within min..max.
//
// Why: requests that wait for their batches and backends cost the gateway
// no CPU while they wait, and a cut below them refuses a session's steady
// load. The demo's paper-chain keeps about 37 in flight at 50 req/s, each
// about 0.7 s; intervals over the target beside the CPU backends' ONNX
// Runtime (a re-plan, a re-placement) cut the limit under that twice in a
// row, and 2 to 27 of its requests a run were refused at the door
// (docs/traffic.md, "The calm floor").
func (c *limitController) floor() float64 {
	f := max(c.calmNow.floor(), c.calmPrev.floor())
	return min(c.max, max(c.min, f+math.Sqrt(f)))
}

func (c *limitController) update(s schedSample, inflight int64) float64 {
	switch {
	case s.samples < minDelaySamples:
		// Nearly idle: no gateway saturated by its requests schedules this
		// little, so a cut just made was a hiccup; a gateway at 50 req/s has
		// such intervals between its busy ones, and a cut they left standing
		// refused its requests until a busier interval came.
		if c.cuts == 1 {
			c.limit = max(c.limit, c.before)
		}
		c.cuts = 0
	case s.delay > c.target:
		if s.queued {
			if c.cuts == 0 {
				c.before = c.limit
			}
			c.cuts++
			g := max(0.5, float64(c.target)/float64(s.delay))
			c.limit = max(c.floor(), min(c.limit, float64(inflight))*g)
		} else {
			c.cuts = 0
		}
	default:
		if c.cuts == 1 {
			c.limit = max(c.limit, c.before)
		} else if float64(inflight)*2 >= c.limit {
			c.limit = min(c.max, c.limit+math.Sqrt(c.limit))
		}
		c.cuts = 0
	}
	return c.limit
}

// schedDelay is the production delaySignal: the p90 of the Go runtime's
// scheduling latencies (time goroutines spent runnable, waiting for a P)
// recorded since the previous read, and whether the goroutines queued for
// the Ps over that time. It keeps the previous counts and read time; read
// is called under the door's lock.
//
// Queued is the mean number of goroutines waiting for a P over the time
// since the previous read, by Little's law the sum of the latencies recorded
// over that time (each at its histogram bucket's middle) divided by it, at
// least GOMAXPROCS. It replaced the runnable count at the moment of the read
// (at least GOMAXPROCS runnable), which a batch's completions waking a
// handful of goroutines at once met on a gateway that used a tenth of a
// core: in the demo (docs/traffic.md, "Overload control"), beside the CPU
// backends' ONNX Runtime, the intervals over the target had a mean of
// 0.05–1.0 goroutines waiting (1.0 once, in a plan swap), and a third of
// them met the instant count; at 512 connections the gateway's had 1.3 to 7
// (tenth percentile 2.2, median 3.6), on GOMAXPROCS 2.
type schedDelay struct {
	sample []metrics.Sample // latencies, gomaxprocs
	prev   []uint64
	delta  []uint64
	at     int64 // unix ns of the previous read
}

func newSchedDelay() *schedDelay {
	s := &schedDelay{sample: []metrics.Sample{{Name: "/sched/latencies:seconds"}, {Name: "/sched/gomaxprocs:threads"}}}
	s.read(time.Now().UnixNano()) // the baseline
	return s
}

func (s *schedDelay) read(now int64) schedSample {
	elapsed := float64(now-s.at) / 1e9
	s.at = now
	metrics.Read(s.sample)
	if s.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedSample{} // not in this runtime: no signal, the limit stays at its max
	}
	procs := 1.0
	if s.sample[1].Value.Kind() == metrics.KindUint64 {
		procs = max(1, float64(s.sample[1].Value.Uint64()))
	}
	h := s.sample[0].Value.Float64Histogram()
	if len(s.prev) != len(h.Counts) {
		s.prev = make([]uint64, len(h.Counts))
		s.delta = make([]uint64, len(h.Counts))
	}
	var n uint64
	for i, c := range h.Counts {
		s.delta[i] = c - s.prev[i]
		s.prev[i] = c
		n += s.delta[i]
	}
	if n == 0 {
		return schedSample{}
	}
	return schedSample{delay: time.Duration(quantile(h.Buckets, s.delta, n, 0.9) * float64(time.Second)), samples: n,
		queued: meanWaiting(h.Buckets, s.delta, elapsed) >= procs}
}

// meanWaiting is the mean number of goroutines that waited for a P over
// elapsed seconds in which the scheduling latencies counts (a histogram over
// buckets, seconds) were recorded: Little's law, the latencies' sum over
// elapsed, each latency at its bucket's middle (the top bucket, unbounded,
// at its lower bound). Zero when elapsed is not positive.
func meanWaiting(buckets []float64, counts []uint64, elapsed float64) float64 {
	if elapsed <= 0 {
		return 0
	}
	var waited float64
	for i, c := range counts {
		if c == 0 {
			continue
		}
		lo, hi := buckets[i], buckets[i+1]
		if math.IsInf(lo, -1) {
			lo = 0
		}
		if math.IsInf(hi, 1) {
			hi = lo
		}
		waited += float64(c) * (lo + hi) / 2
	}
	return waited / elapsed
}

// quantile returns the q-quantile of a histogram (counts[i] in
// [buckets[i], buckets[i+1]), n their sum): the lower bound of the bucket it
// falls in (the upper one for the first, whose lower bound may be -Inf).
func quantile(buckets []float64, counts []uint64, n uint64, q float64) float64 {
	want := uint64(math.Ceil(q * float64(n)))
	var acc uint64
	for i, c := range counts {
		acc += c
		if acc >= want {
			if lo := buckets[i]; !math.IsInf(lo, -1) {
				return lo
			}
			return buckets[i+1]
		}
	}
	return buckets[len(buckets)-2]
}

// OverloadStats returns the door's state; zero when it is off.
func (s *Server) OverloadStats() OverloadStats {
	if s.door == nil {
		return OverloadStats{}
	}
	st := s.door.stats()
	st.ShedBySession, st.ShedUnnamed = s.stats.shedBySession(), s.door.unnamed.Load()
	return st
}
