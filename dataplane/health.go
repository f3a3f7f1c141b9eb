package dataplane

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/tracing"
)

// HealthOptions configure a Health.
type HealthOptions struct {
	// ProbeInterval is how often every known backend that is up is probed
	// (backends.Client.Probe: grpc.health.v1, else ServerReady); a failed
	// probe ejects it. 0: 1s; negative: no periodic probes (a failed call
	// still ejects, and an ejected backend is still probed until it is back).
	ProbeInterval time.Duration
	// HedgeBudget is the share of batches that may be hedged (sent a second
	// time when overdue), in [0, 1]. 0: no hedging.
	HedgeBudget float64
	// Logger receives one line per change of a backend's state (down, up,
	// slow, not slow); nil logs nothing.
	Logger *zap.Logger
	// OnChange, when set, is called (on a goroutine of its own) with the ids of
	// the backends that are down after each ejection and return, so the
	// control plane can re-place their share.
	OnChange func(down []string)
	// Calibration, when set, receives every batch's measured duration
	// (calibrate.Estimator.Observe; docs/calibration.md).
	Calibration *calibrate.Estimator
}

// Health is the gateway's view of its backends' health, shared by every
// LiveRunner of a LiveSwitch: which backends are down (ejected from the
// dispatch table), how much slower than their profiles they run, and the
// counters of retries and hedges. It is the dispatchers' HealthTable.
//
// A backend is ejected on the first call that fails at the transport (refused,
// reset, UNAVAILABLE) or finds its model not loaded (a restarted backend), and
// on a failed periodic probe. Ejection sets an atomic flag the dispatchers
// read on each dispatch and moves the batches queued on the backend's
// machines (Dispatcher.Reroute), on the goroutine that saw the failure: it
// takes effect within microseconds. An ejected backend is probed with
// backoff (50 ms doubling to 1 s); when a probe passes, the models the
// runners need there are loaded again and it is back.
//
// The request path reads it with atomic loads; its lock guards the tables
// and is taken by runners being built and closed, by ejections and probes.
type Health struct {
	opts HealthOptions
	log  *zap.Logger

	mu       sync.Mutex
	byID     map[string]*backendHealth
	onChange func(down []string) // opts.OnChange, or set by LiveSwitch.ReplaceOnEjection
	disps    map[*dispatcher.Dispatcher]struct{}
	closed   bool
	warned   map[string]bool // models whose warm-up failure was logged (warnWarmUpOnce)
	noWarm   map[string]bool // models whose dummy inputs a backend rejected: not warmed up again
	probes   bool            // probeLoop started
	static   atomic.Bool     // startProbes was called: the static list, a backend that left the plan may be needed again
	stop     chan struct{}
	wg       sync.WaitGroup
	forgets  bool // forgetLoop started

	prior                          atomic.Uint64 // float64 bits: the pace of a backend not measured yet (spreadPrior)
	unpaced                        atomic.Int64  // backends of byID not measured yet: spreadPrior runs while > 0
	priorAt                        atomic.Int64  // unix ns of the last spreadPrior (at most one each priorEvery)
	batches, hedgesWon, hedgesLost atomic.Uint64
	hedgeNanos                     atomic.Int64
	racesWon, racesLost            atomic.Uint64 // raced batches: a copy answered first, the first choice did
	raceNanos                      atomic.Int64  // machine time of race copies until the first answer
	retries                        [numRetryReasons]atomic.Uint64
	lateLogged                     atomic.Int64  // unix ns of the last late-batch line (noteLate)
	lateLeftOut                    atomic.Uint64 // late batches not logged since it
}

var (
	_ dispatcher.HealthTable = (*Health)(nil)
	_ dispatcher.DeviceTable = (*Health)(nil)
	_ prometheus.Collector   = (*Health)(nil)
)

// backendHealth is one backend's state.
type backendHealth struct {
	dispatcher.MachineHealth
	dev     dispatcher.Device // the batches every runner's dispatchers sent it
	id      string
	where   atomic.Pointer[clientAt] // how to reach it (set by the runners that use it)
	probing atomic.Bool
	refs    atomic.Int32  // runners open that use the backend
	ratio   atomic.Uint64 // float64 bits: EWMA of measured/profiled batch duration (0: no sample)
	slow    atomic.Bool
	seenAt  atomic.Int64 // unix ns: the latest sample of ratio (Health.forget)
	// forgotten: forget dropped the straggler mark, EWMA, host share and
	// pace window since the latest sample; the pace and slowness stand.
	forgotten atomic.Bool
	host      atomic.Int64 // ns: EWMA of the network-and-host share of its batches (Health.hostShare)
	// lastQueue and lastCompute are the queue and compute time (ns) the
	// backend reported with its latest answer, for the late-batch line
	// (noteLate): that batch's, unless another answer came in between.
	lastQueue, lastCompute atomic.Int64

	lastEnd    atomic.Int64 // unix ns: the latest end of a batch on the backend (backendHealth.ran)
	paceMu     sync.Mutex
	paces      paceWindow    // the pace's latest samples (Health.paced)
	paceRatio  atomic.Uint64 // float64 bits: the pace set from them (0: not measured yet)
	pacedAt    atomic.Int64  // unix ns: when paceRatio was set
	ejections  atomic.Uint64
	ejectNanos atomic.Int64 // the last ejection: from the failed call's end to the flag set
	modelsMu   sync.Mutex
	models     map[string][2]int // model -> batch, concurrency the runners need here
}

type retryReason int

const (
	retryNotExecuted retryReason = iota
	retryTransport
	retryNotLoaded
	retryFailed
	numRetryReasons
)

var retryReasonNames = [numRetryReasons]string{"not_executed", "transport", "model_not_loaded", "failed"}

// Straggler detection: the weight of a batch in the EWMA of its backend's
// measured/profiled duration, and the ratios at which the backend starts and
// stops counting as slow (apart, so that one batch does not flip it).
const (
	ratioWeight = 0.2
	slowEnter   = 1.5
	slowExit    = 1.25
	// slowScale: from this ratio on, below a straggler's, the dispatcher
	// already scales the backend's expected durations by it (lanes free
	// later, admission predicts later), so that a device slower than its
	// profile is refused to, not failed late, until the plan catches up
	// (docs/calibration.md); below slowScaleExit it runs as profiled again.
	slowScale     = 1.1
	slowScaleExit = 1.05
	// hedgeAfter: a batch still running this many times its profiled duration
	// is overdue (the profile's tail; the sim's jitter stays well inside it).
	hedgeAfter = 2
	// maxTries bounds the calls of one batch: the first and two retries.
	maxTries = 3
)

// NewHealth returns a Health. Close stops its probes.
func NewHealth(opts HealthOptions) *Health {
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = time.Second
	}
	h := &Health{opts: opts, log: opts.Logger, byID: map[string]*backendHealth{}, disps: map[*dispatcher.Dispatcher]struct{}{},
		stop: make(chan struct{})}
	if h.log == nil {
		h.log = zap.NewNop()
	}
	h.onChange = opts.OnChange
	return h
}

// startProbes starts the periodic probes of every backend a runner uses (the
// static mode's health checks; LiveSwitch.ReplaceOnEjection calls it). Once.
func (h *Health) startProbes() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.probes || h.closed || h.opts.ProbeInterval <= 0 {
		return
	}
	h.probes = true
	h.static.Store(true)
	h.wg.Add(1)
	go h.probeLoop()
}

// Close stops the probes and waits for them.
func (h *Health) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.stop)
	h.mu.Unlock()
	h.wg.Wait()
}

// Machine returns backend id's MachineHealth (dispatcher.HealthTable).
func (h *Health) Machine(id string) *dispatcher.MachineHealth { return &h.entry(id).MachineHealth }

// Device returns backend id's lanes as every runner's dispatchers see them
// (dispatcher.DeviceTable): the modules a plan packs onto the backend, and
// the old and new runner across a plan swap, wait behind each other's batches.
func (h *Health) Device(id string) *dispatcher.Device { return &h.entry(id).dev }

func (h *Health) entry(id string) *backendHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	bh := h.byID[id]
	if bh == nil {
		bh = &backendHealth{id: id, models: map[string][2]int{}}
		bh.SetPace(math.Float64frombits(h.prior.Load())) // not measured yet: the measured backends' pace
		h.byID[id] = bh
		h.unpaced.Add(1)
	}
	return bh
}

// clientAt is a backend's address and the pool that holds its client: the
// probes take the client from the pool each time, since the LiveSwitch closes
// the clients of backends no runner uses (as when a dead one's share was
// re-placed) and the pool then makes a new one.
type clientAt struct {
	pool *backends.Pool
	addr string
}

func (bh *backendHealth) client() *backends.Client {
	w := bh.where.Load()
	if w == nil {
		return nil
	}
	c, err := w.pool.Client(w.addr)
	if err != nil {
		return nil
	}
	return c
}

// locate records where backend id is and returns its entry.
func (h *Health) locate(id string, pool *backends.Pool, addr string) *backendHealth {
	bh := h.entry(id)
	if w := bh.where.Load(); w == nil || w.pool != pool || w.addr != addr {
		bh.where.Store(&clientAt{pool: pool, addr: addr})
	}
	return bh
}

// track records where backend id is and a model a runner loaded there (with
// its batch and concurrency), to load again when the backend comes back.
func (h *Health) track(id string, pool *backends.Pool, addr, model string, batch, concurrency int) *backendHealth {
	bh := h.locate(id, pool, addr)
	bh.modelsMu.Lock()
	bh.models[model] = [2]int{batch, concurrency}
	bh.modelsMu.Unlock()
	return bh
}

func (h *Health) attach(d *dispatcher.Dispatcher) {
	h.mu.Lock()
	h.disps[d] = struct{}{}
	if !h.forgets && !h.closed {
		h.forgets = true
		h.wg.Add(1)
		go h.forgetLoop()
	}
	h.mu.Unlock()
}

func (h *Health) detach(d *dispatcher.Dispatcher) {
	h.mu.Lock()
	delete(h.disps, d)
	h.mu.Unlock()
}

// ejects reports whether err is a failure that takes the backend out of the
// table: the transport (refused, reset, UNAVAILABLE) or a model the backend
// no longer has (it restarted).
func ejects(err error) bool {
	return backends.IsTransport(err) || errors.Is(err, backends.ErrModelNotLoaded)
}

// retryReasonOf says why a failed batch may be sent again elsewhere; ok is
// false for a deadline, a cancellation or an input the backend calls invalid.
func retryReasonOf(err error) (retryReason, bool) {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, backends.ErrInvalidInput):
		return 0, false
	case backends.NotExecuted(err):
		return retryNotExecuted, true
	case backends.IsTransport(err):
		return retryTransport, true
	case errors.Is(err, backends.ErrModelNotLoaded):
		return retryNotLoaded, true
	case errors.Is(err, backends.ErrBackendFailed), errors.Is(err, backends.ErrBackendBadResponse), errors.Is(err, backends.ErrBackendOverloaded):
		return retryFailed, true
	}
	return 0, false
}

// eject takes bh out of the dispatch table (if it was in), moves the batches
// queued on its machines and starts probing it. failedAt is when the failed
// call returned.
func (h *Health) eject(bh *backendHealth, why error, failedAt time.Time) {
	if !bh.SetDown(true) {
		return
	}
	bh.ejectNanos.Store(int64(time.Since(failedAt)))
	bh.ejections.Add(1)
	moved := h.reroute()
	h.log.Warn("backend down: out of the dispatch table until a health probe passes", zap.String("backend", bh.id),
		zap.Duration("after", time.Since(failedAt)), zap.Int("batches_moved", moved), zap.Error(why))
	h.changed()
	h.startProbe(bh)
}

// reroute moves the batches queued on down machines, and on stragglers where
// an idle machine of their group is not one, in every dispatcher
// (Dispatcher.Reroute), and reports how many moved.
func (h *Health) reroute() int {
	h.mu.Lock()
	disps := make([]*dispatcher.Dispatcher, 0, len(h.disps))
	for d := range h.disps {
		disps = append(disps, d)
	}
	h.mu.Unlock()
	moved := 0
	for _, d := range disps {
		moved += d.Reroute()
	}
	return moved
}

// startProbe probes an ejected backend with backoff until it passes (then it
// is back) or the Health closes.
func (h *Health) startProbe(bh *backendHealth) {
	if !bh.probing.CompareAndSwap(false, true) {
		return
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		bh.probing.Store(false)
		return
	}
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		defer bh.probing.Store(false)
		wait := 50 * time.Millisecond
		t := time.NewTimer(wait)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
			if !h.static.Load() && bh.refs.Load() <= 0 {
				return // no runner uses it any more (membership dropped it): stop probing; it stays down until a runner uses it again
			}
			if err := h.revive(bh); err == nil {
				bh.SetDown(false)
				h.log.Info("backend up: back in the dispatch table", zap.String("backend", bh.id))
				h.changed()
				return
			}
			wait = min(2*wait, time.Second)
			t.Reset(wait)
		}
	}()
}

// revive probes bh and loads the models the runners need there (a restarted
// backend has none).
func (h *Health) revive(bh *backendHealth) error {
	c := bh.client()
	if c == nil {
		return errors.New("no client")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Probe(ctx); err != nil {
		return err
	}
	bh.modelsMu.Lock()
	models := make(map[string][2]int, len(bh.models))
	for m, l := range bh.models {
		models[m] = l
	}
	bh.modelsMu.Unlock()
	for m, l := range models {
		if err := c.Load(ctx, m, l[0], l[1]); err != nil {
			return err
		}
	}
	return nil
}

// probeLoop probes every known backend that is up, each ProbeInterval.
func (h *Health) probeLoop() {
	defer h.wg.Done()
	t := time.NewTicker(h.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		h.mu.Lock()
		all := make([]*backendHealth, 0, len(h.byID))
		for _, bh := range h.byID {
			all = append(all, bh)
		}
		h.mu.Unlock()
		for _, bh := range all {
			if bh.Down() || bh.refs.Load() <= 0 {
				continue
			}
			c := bh.client()
			if c == nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), min(h.opts.ProbeInterval, time.Second))
			start := time.Now()
			err := c.Probe(ctx)
			cancel()
			if err != nil {
				h.eject(bh, err, start)
			}
		}
	}
}

// changed tells OnChange which backends are down now.
func (h *Health) changed() {
	h.mu.Lock()
	f := h.onChange
	h.mu.Unlock()
	if f == nil {
		return
	}
	go f(h.Down())
}

func (h *Health) setOnChange(f func(down []string)) {
	h.mu.Lock()
	h.onChange = f
	h.mu.Unlock()
}

// isSlow reports whether backend id is a straggler.
func (h *Health) isSlow(id string) bool {
	h.mu.Lock()
	bh := h.byID[id]
	h.mu.Unlock()
	return bh != nil && bh.slow.Load()
}

// isDown reports whether backend id is ejected.
func (h *Health) isDown(id string) bool {
	h.mu.Lock()
	bh := h.byID[id]
	h.mu.Unlock()
	return bh != nil && bh.Down()
}

// Down returns the ids of the backends that are down, sorted.
func (h *Health) Down() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var down []string
	for id, bh := range h.byID {
		if bh.Down() {
			down = append(down, id)
		}
	}
	sort.Strings(down)
	return down
}

// observe adds a batch that took elapsed on bh, profiled at profiled, to bh's
// EWMA, marks bh slow or not slow when it crosses slowEnter or slowExit (one
// log line per change), and hands the dispatchers the EWMA as the backend's
// slowness from slowScale on.
func (h *Health) observe(bh *backendHealth, elapsed, profiled time.Duration) {
	if profiled <= 0 {
		return
	}
	x := float64(elapsed) / float64(profiled)
	bh.seenAt.Store(time.Now().UnixNano())
	bh.forgotten.Store(false)
	var r float64
	for {
		old := bh.ratio.Load()
		r = math.Float64frombits(old)
		if r == 0 {
			r = x
		} else {
			r += ratioWeight * (x - r)
		}
		if bh.ratio.CompareAndSwap(old, math.Float64bits(r)) {
			break
		}
	}
	switch slow := bh.slow.Load(); {
	case !slow && r >= slowEnter:
		if bh.slow.CompareAndSwap(false, true) {
			bh.SetSlowness(r)
			h.log.Warn("backend slow: fewer batches while its batches run this much longer than profiled", zap.String("backend", bh.id),
				zap.Float64("ratio", r), zap.Int("batches_moved", h.reroute()))
			h.changed()
		}
	case slow && r < slowExit:
		if bh.slow.CompareAndSwap(true, false) {
			bh.SetSlowness(1)
			h.log.Info("backend no longer slow", zap.String("backend", bh.id), zap.Float64("ratio", r))
			h.changed()
		}
	}
	switch {
	case bh.slow.Load() || r >= slowScale:
		bh.SetSlowness(r)
	case r < slowScaleExit:
		bh.SetSlowness(1)
	}
}

// Forgetting (docs/calibration.md, "Forgetting"): what a backend's batches
// taught is dropped in two steps once no batch has measured it. After
// forgetAfter (checked every forgetEvery) its straggler mark (slow: fewer
// batches), its straggler EWMA, its host share and its pace window go: a
// device slowed by a burst, or avoided because it was slow, takes batches
// again, and its next batch measures it anew (the EWMA and the pace start
// from that batch's own ratio). Its pace and slowness, what the dispatchers
// predict its batches with, stand until that batch, or until
// forgetPaceAfter: the first batch on a device forgotten at once was
// predicted as profiled, and on a device that was still slow it ended late
// (one device of each module 1.6x: 1-6 requests 504 a run, each on the
// first batch after the straggler was forgotten, late by 13-15 ms). While
// batches run the two follow them (the EWMA's weight, the pace's latest
// paceSamples full batches); a pace a warm-up measured waits for the
// backend's first batch.
const (
	forgetAfter     = 2 * time.Second
	forgetPaceAfter = 10 * time.Second
	forgetEvery     = 250 * time.Millisecond
)

// forgetLoop runs forget every forgetEvery until Close (started by the
// first attach).
func (h *Health) forgetLoop() {
	defer h.wg.Done()
	t := time.NewTicker(forgetEvery)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case now := <-t.C:
			h.forget(now)
		}
	}
}

// forget drops, on every backend whose latest batch ended before now −
// forgetAfter, its straggler mark (one log line), EWMA, host share and pace
// window, and once before now − forgetPaceAfter its pace and slowness
// (SetPace(1), SetSlowness(1)). O(backends); the control path's.
func (h *Health) forget(now time.Time) {
	before := now.Add(-forgetAfter).UnixNano()
	stale := now.Add(-forgetPaceAfter).UnixNano()
	h.mu.Lock()
	all := make([]*backendHealth, 0, len(h.byID))
	for _, bh := range h.byID {
		all = append(all, bh)
	}
	h.mu.Unlock()
	changed := false
	for _, bh := range all {
		seen := bh.seenAt.Load()
		if seen == 0 || seen >= before {
			continue // measured lately, or forgotten (a warm-up's pace waits for traffic)
		}
		if !bh.forgotten.Swap(true) {
			bh.ratio.Store(0)
			bh.host.Store(0)
			bh.SetHostShare(0)
			if bh.slow.CompareAndSwap(true, false) {
				h.log.Info("backend no longer slow: no batch has measured it", zap.String("backend", bh.id), zap.Duration("for", forgetAfter),
					zap.Float64("slowness_kept", bh.Slowness()))
				changed = true
			}
			bh.paceMu.Lock()
			bh.paces = paceWindow{}
			bh.paceMu.Unlock()
		}
		if seen < stale {
			bh.seenAt.Store(0)
			bh.forgotten.Store(false)
			bh.SetSlowness(1)
			bh.paceMu.Lock()
			bh.SetPace(1)
			bh.paceMu.Unlock()
		}
	}
	if changed {
		h.changed()
	}
}

// hostShare adds one batch's network-and-host share (the round trip less
// the queue and compute time the backend reported) to bh's EWMA, which the
// dispatcher may read (MachineHealth.HostShare) and /metrics shows
// (piccolo_gateway_backend_host_seconds). Per batch: atomics only.
func (h *Health) hostShare(bh *backendHealth, d time.Duration) {
	d = max(d, 0)
	for {
		old := bh.host.Load()
		r := int64(d)
		if old != 0 {
			r = old + int64(ratioWeight*float64(int64(d)-old))
		}
		if bh.host.CompareAndSwap(old, max(r, 1)) {
			bh.SetHostShare(time.Duration(r))
			return
		}
	}
}

// ran returns how long a batch sent at start and answered at end ran on the
// backend, for the calibration: on a one-lane device (concurrency 1), from
// the later of start and the end of the batch answered before it there (the
// batch waited for that one: another module's on a shared device, or this
// module's own when the device runs slower than planned, so the wait
// expected is not what it waited), to end; on a device of several lanes,
// end − start when it was not expected to queue (wait 0), else ok false (how
// long it queued is unknown). Hedged or concurrent callers of one backend
// make it approximate, never longer than end − start.
func (bh *backendHealth) ran(start, end time.Time, concurrency int, wait time.Duration) (time.Duration, bool) {
	e := end.UnixNano()
	prev := bh.lastEnd.Load()
	for prev < e && !bh.lastEnd.CompareAndSwap(prev, e) {
		prev = bh.lastEnd.Load()
	}
	switch s := start.UnixNano(); {
	case concurrency <= 1 && prev > s && prev < e:
		return time.Duration(e - prev), true
	case concurrency <= 1 || wait == 0:
		return end.Sub(start), true
	}
	return 0, false
}

// paceSamples is how many of a backend's latest full batches its pace reads.
const paceSamples = 4

// paceWindow is a backend's latest compute ratios (run time over the
// offline profile's duration).
type paceWindow struct {
	r       [paceSamples]float64
	n, next int
}

// paced adds a full batch that ran ratio times its offline profile to the
// backend's pace, and sets its MachineHealth.SetPace to the second largest
// of the latest paceSamples ratios (the only one after the first): a device
// slower than profiled is expected so from its next batch, before the
// calibration trusts it (10 batches) and a plan is made from that
// (docs/calibration.md, "Admission before calibration"); one stalled batch
// does not outlast the next. Per batch, at now: the backend's lock, no
// allocation; then, while a backend is not measured yet, spreadPrior.
func (h *Health) paced(bh *backendHealth, ratio float64, now time.Time) {
	if ratio <= 0 {
		return
	}
	bh.paceMu.Lock()
	w := &bh.paces
	w.r[w.next] = ratio
	w.next = (w.next + 1) % paceSamples
	w.n = min(w.n+1, paceSamples)
	first, second := 0.0, 0.0
	for _, x := range w.r[:w.n] {
		if x > first {
			first, second = x, first
		} else if x > second {
			second = x
		}
	}
	if w.n == 1 {
		second = first
	}
	bh.SetPace(second)
	if bh.paceRatio.Swap(math.Float64bits(second)) == 0 {
		h.unpaced.Add(-1)
	}
	bh.pacedAt.Store(now.UnixNano())
	bh.paceMu.Unlock()
	if h.unpaced.Load() > 0 {
		// At most once each priorEvery: a backend that is never measured
		// (ejected at load, no profile entry, a multi-lane one whose batches
		// always queue) would otherwise put the pool-wide lock on every
		// full batch of every backend for good.
		if last := h.priorAt.Load(); now.UnixNano()-last >= int64(priorEvery) && h.priorAt.CompareAndSwap(last, now.UnixNano()) {
			h.spreadPrior(now)
		}
	}
}

// priorEvery bounds spreadPrior to one sweep a period: a backend not
// measured yet takes the prior at most this much later.
const priorEvery = 100 * time.Millisecond

// priorWindow: the backends measured this recently make the prior (one the
// plan no longer uses keeps its last pace).
const priorWindow = 2 * time.Second

// spreadPrior sets the pace of every backend not measured yet to the lower
// median of the paces of the backends measured in the last priorWindow:
// with every device slower than profiled, the first batch
// of each is expected so, not only its second; with one device slow, the
// others are not taken for it. A backend measured since keeps its own.
// O(backends), under h.mu: paced calls it only while a backend of the pool
// is not measured yet (h.unpaced), and at most once each priorEvery, so
// once every backend has run a full batch no batch takes the pool-wide
// lock; a backend that joins later gets
// the last prior and turns the sweep on again until it is measured.
func (h *Health) spreadPrior(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var buf [64]float64
	rs := buf[:0]
	since := now.Add(-priorWindow).UnixNano()
	for _, o := range h.byID {
		if r := math.Float64frombits(o.paceRatio.Load()); r > 0 && o.pacedAt.Load() >= since {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return
	}
	slices.Sort(rs)
	prior := rs[(len(rs)-1)/2]
	h.prior.Store(math.Float64bits(prior))
	for _, o := range h.byID {
		o.paceMu.Lock() // as paced: a pace measured meanwhile is not overwritten by the prior
		if o.paceRatio.Load() == 0 {
			o.SetPace(prior)
		}
		o.paceMu.Unlock()
	}
}

// warnWarmUpOnce reports whether a warm-up failure of model is to be logged:
// true the first time for each model. invalid (a backend rejected the dummy
// inputs) also marks the model as one not to warm up again (warmsUp).
func (h *Health) warnWarmUpOnce(model string, invalid bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if invalid {
		if h.noWarm == nil {
			h.noWarm = map[string]bool{}
		}
		h.noWarm[model] = true
	}
	if h.warned[model] {
		return false
	}
	if h.warned == nil {
		h.warned = map[string]bool{}
	}
	h.warned[model] = true
	return true
}

// warmsUp reports whether model may be warmed up: false once a backend has
// rejected its dummy inputs.
func (h *Health) warmsUp(model string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.noWarm[model]
}

// allowHedge reports whether one more hedge stays within the budget (a share
// of the batches sent), and counts it if so.
func (h *Health) allowHedge() bool {
	if h.opts.HedgeBudget <= 0 {
		return false
	}
	won, lost := h.hedgesWon.Load(), h.hedgesLost.Load()
	return float64(won+lost+1) <= h.opts.HedgeBudget*float64(h.batches.Load())+1
}

// BackendHealth is one backend as Health sees it.
type BackendHealth struct {
	ID       string
	Up       bool
	Slowness float64 // EWMA of measured/profiled batch durations (0: no batch yet, or forgotten)
	Slow     bool
	// Pace is the backend's pace (MachineHealth.Pace: 1 when not set);
	// HostShare the EWMA of its batches' network-and-host share (0: none
	// reported).
	Pace      float64
	HostShare time.Duration
	Ejections uint64
	// LastEjection is how long the last ejection took from the end of the
	// failed call (or probe) to the backend's leaving the table.
	LastEjection time.Duration
}

// Backends returns every known backend's state, sorted by id.
func (h *Health) Backends() []BackendHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]BackendHealth, 0, len(h.byID))
	for id, bh := range h.byID {
		out = append(out, BackendHealth{ID: id, Up: !bh.Down(), Slowness: math.Float64frombits(bh.ratio.Load()), Slow: bh.slow.Load(),
			Pace: bh.Pace(), HostShare: time.Duration(bh.host.Load()),
			Ejections: bh.ejections.Load(), LastEjection: time.Duration(bh.ejectNanos.Load())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// FaultStats are Health's counters.
type FaultStats struct {
	Batches               uint64 // first calls of batches
	Retries               uint64
	HedgesWon, HedgesLost uint64
	HedgeTime             time.Duration // machine time of hedged calls until the first answer
	RacesWon, RacesLost   uint64        // raced batches (Module.Race) a copy won, the first choice won
	RaceTime              time.Duration // machine time of race copies until the first answer
}

// Stats returns the counters.
func (h *Health) Stats() FaultStats {
	var r uint64
	for i := range h.retries {
		r += h.retries[i].Load()
	}
	return FaultStats{Batches: h.batches.Load(), Retries: r, HedgesWon: h.hedgesWon.Load(), HedgesLost: h.hedgesLost.Load(),
		HedgeTime: time.Duration(h.hedgeNanos.Load()), RacesWon: h.racesWon.Load(), RacesLost: h.racesLost.Load(),
		RaceTime: time.Duration(h.raceNanos.Load())}
}

// Describe implements prometheus.Collector.
func (h *Health) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{metrics.DescRetries, metrics.DescHedges, metrics.DescHedgeSeconds, metrics.DescRaces, metrics.DescRaceSeconds, metrics.DescBatchesSent,
		metrics.DescBackendUp, metrics.DescBackendSlowness, metrics.DescBackendEjections, metrics.DescBackendHostSeconds} {
		ch <- d
	}
}

// Collect implements prometheus.Collector, at scrape time.
func (h *Health) Collect(ch chan<- prometheus.Metric) {
	for i := range h.retries {
		ch <- prometheus.MustNewConstMetric(metrics.DescRetries, prometheus.CounterValue, float64(h.retries[i].Load()), retryReasonNames[i])
	}
	ch <- prometheus.MustNewConstMetric(metrics.DescHedges, prometheus.CounterValue, float64(h.hedgesWon.Load()), "won")
	ch <- prometheus.MustNewConstMetric(metrics.DescHedges, prometheus.CounterValue, float64(h.hedgesLost.Load()), "lost")
	ch <- prometheus.MustNewConstMetric(metrics.DescHedgeSeconds, prometheus.CounterValue, time.Duration(h.hedgeNanos.Load()).Seconds())
	ch <- prometheus.MustNewConstMetric(metrics.DescRaces, prometheus.CounterValue, float64(h.racesWon.Load()), "won")
	ch <- prometheus.MustNewConstMetric(metrics.DescRaces, prometheus.CounterValue, float64(h.racesLost.Load()), "lost")
	ch <- prometheus.MustNewConstMetric(metrics.DescRaceSeconds, prometheus.CounterValue, time.Duration(h.raceNanos.Load()).Seconds())
	ch <- prometheus.MustNewConstMetric(metrics.DescBatchesSent, prometheus.CounterValue, float64(h.batches.Load()))
	for _, b := range h.Backends() {
		up := 0.0
		if b.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(metrics.DescBackendUp, prometheus.GaugeValue, up, b.ID)
		ch <- prometheus.MustNewConstMetric(metrics.DescBackendSlowness, prometheus.GaugeValue, cmp.Or(b.Slowness, 1), b.ID)
		ch <- prometheus.MustNewConstMetric(metrics.DescBackendEjections, prometheus.CounterValue, float64(b.Ejections), b.ID)
		ch <- prometheus.MustNewConstMetric(metrics.DescBackendHostSeconds, prometheus.GaugeValue, b.HostShare.Seconds(), b.ID)
	}
}

// NewPool returns the backend client pool a LiveRunner or LiveSwitch makes
// when it is given none: grpc-go's reconnect backoff capped at 1 s (its
// default grows to 120 s), so a backend that restarts is dialled again within
// about a second; the health probes also reset the backoff of a backend they
// wait for (backends.Client.Probe). With tracing on (package tracing, set up
// before the pool is made), each backend call is a client span whose
// traceparent the backend receives.
func NewPool() *backends.Pool { return newPool() }

// NewTokenPool is NewPool whose clients send token, the gateway's
// credential, on every call (backends.TokenDialOption): a backend started
// with --admin-token loads and unloads models only for it.
func NewTokenPool(token string) *backends.Pool {
	if o := backends.TokenDialOption(token); o != nil {
		return newPool(o)
	}
	return newPool()
}

func newPool(extra ...grpc.DialOption) *backends.Pool {
	dial := append([]grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: time.Second,
	})}, tracing.DialOptions()...)
	return backends.NewPool(backends.ClientOptions{DialOptions: append(dial, extra...)})
}
