package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/piccolo-serving/piccolo/arrival"
	"github.com/piccolo-serving/piccolo/internal/registry"
)

// Protocols lists the --protocol values.
const Protocols = "http, grpc"

// LateSendThreshold is how far behind its due time a send must go out to count
// in Report.LateSends.
const LateSendThreshold = time.Millisecond

// maxRequests bounds one run's schedule (rate × duration), so the preallocated
// result slots stay within memory (8 bytes each).
const maxRequests = 50_000_000

// ErrBadOptions marks Options that Run refuses.
var ErrBadOptions = errors.New("bad load generator options")

// Options configures one run. Target, Session and Rate are required; zero values
// of the others take the defaults noted.
type Options struct {
	Target   string  // HTTP: http://host:port[/base] or host:port; gRPC: host:port
	Protocol string  // "http" (default) or "grpc"
	Session  string  // the session, exposed as a KServe v2 model
	Rate     float64 // mean offered rate, req/s (mmpp, trace: set from the process)
	Arrival  string  // arrival process: constant, poisson (default), gamma, mmpp, trace, or a name in Arrivals
	// Arrivals is where Arrival is looked up; nil: arrival.Builtin.
	Arrivals *registry.Registry[arrival.Kind]
	CV2      float64 // squared coefficient of variation of gaps, gamma only (default 1)
	Seed     uint64  // arrival process seed (default 1)
	// MMPP holds the parameters of Arrival "mmpp"; Trace is what Arrival "trace"
	// replays (offsets from its first arrival, skip and speed applied).
	MMPP  arrival.MMPP
	Trace *arrival.Trace

	Duration    time.Duration // how long to send (default 10 s; a trace: its span)
	Drain       time.Duration // how long to wait for replies after the last send (default 10 s)
	Timeout     time.Duration // per-request client timeout (default 10 s)
	MaxInflight int           // bound on outstanding requests (default 10000)

	// SLO is the end-to-end latency objective for goodput and attainment. 0 asks the
	// server's model metadata (parameter "slo_ms", HTTP only); if that fails too,
	// attainment is reported as n/a.
	SLO time.Duration
	// Payloads are cycled over the requests (LoadInputs builds them). Empty: zeros
	// of the shape the model metadata declares, else one FP32 [1,1] "input0".
	Payloads []Payload

	// PerSecond splits the report by the second each request was due in
	// (Report.Seconds).
	PerSecond bool

	// Progress, when non-nil, receives a progress bar (e.g. os.Stderr on a terminal).
	Progress io.Writer
}

func (o *Options) setDefaults() {
	if o.Protocol == "" {
		o.Protocol = "http"
	}
	if o.Arrival == "" {
		o.Arrival = "poisson"
	}
	if o.CV2 == 0 {
		o.CV2 = 1
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
		if o.Arrival == "trace" && o.Trace != nil && len(o.Trace.Offsets) > 0 {
			o.Duration = o.Trace.Span() + 1 // sends are in [0, Duration): the last is in
		}
	}
	switch {
	case o.Arrival == "trace": // the rate over the window sent, not the whole trace's
		if o.Trace != nil && len(o.Trace.Offsets) > 0 {
			n, _ := o.Trace.MeanRate(o.Duration)
			o.Rate = float64(n) / o.Duration.Seconds()
		}
	case o.ownRate():
		o.Rate = o.spec().MeanRate()
	}
	if o.Drain == 0 {
		o.Drain = 10 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	if o.MaxInflight == 0 {
		o.MaxInflight = 10000
	}
}

func (o *Options) validate() error {
	switch {
	case o.Target == "":
		return fmt.Errorf("%w: no target; give --target http://host:port (HTTP) or host:port (gRPC)", ErrBadOptions)
	case o.Session == "":
		return fmt.Errorf("%w: no session; give --session NAME (the model name the gateway exposes)", ErrBadOptions)
	case o.Protocol != "http" && o.Protocol != "grpc":
		return fmt.Errorf("%w: protocol %q; allowed: %s", ErrBadOptions, o.Protocol, Protocols)
	case !o.ownRate() && (!(o.Rate > 0) || math.IsInf(o.Rate, 0)):
		return fmt.Errorf("%w: rate %v req/s; must be a finite number > 0", ErrBadOptions, o.Rate)
	case o.Duration < 0 || o.Drain < 0 || o.Timeout < 0 || o.SLO < 0:
		return fmt.Errorf("%w: duration %v, drain %v, timeout %v, slo %v: none may be negative", ErrBadOptions, o.Duration, o.Drain, o.Timeout, o.SLO)
	case o.MaxInflight < 0:
		return fmt.Errorf("%w: max in-flight %d; must be > 0", ErrBadOptions, o.MaxInflight)
	}
	if n := o.Rate * o.Duration.Seconds(); n > maxRequests {
		return fmt.Errorf("%w: rate %v req/s for %v is %.0f requests; at most %d per run", ErrBadOptions, o.Rate, o.Duration, n, maxRequests)
	}
	return nil
}

// run is the state of one Run shared with the sending goroutines.
type run struct {
	t        transport
	payloads []Payload
	ctx      context.Context // canceled when Run's context is, or when Run returns
	// results[k] is request k's outcome: latency in ns << 8 | kind, 0 while pending.
	// Each slot is written once, by compare-and-swap from 0.
	results  []atomic.Uint64
	inflight atomic.Int64
	finished atomic.Int64 // outcomes recorded, for the progress bar
	wg       sync.WaitGroup
}

func (r *run) record(k int, outcome kind, latency time.Duration) bool {
	if r.results[k].CompareAndSwap(0, uint64(latency)<<8|uint64(outcome)) {
		r.finished.Add(1)
		return true
	}
	return false
}

// send runs on its own goroutine: one request, from release to outcome.
func (r *run) send(k int, released time.Time) {
	outcome := r.t.infer(r.ctx, uint64(k), &r.payloads[k%len(r.payloads)])
	r.record(k, outcome, time.Since(released))
	r.inflight.Add(-1)
	r.wg.Done()
}

// Run drives one open-loop load test and returns its report. It returns an error,
// before sending anything, for bad options (ErrBadOptions), an unusable target, or
// unreadable inputs; once sending has begun every problem is an error kind in the
// report. Cancelling ctx stops the run early; the report then covers what was sent.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.setDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if _, err := o.spec().New(o.Seed); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	var t transport
	switch o.Protocol {
	case "http":
		ht, err := newHTTPTransport(o.Target, o.Session, o.Timeout, o.MaxInflight)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadOptions, err)
		}
		t = ht
	case "grpc":
		gt, err := newGRPCTransport(o.Target, o.Session, o.Timeout)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadOptions, err)
		}
		t = gt
	}
	defer t.close()

	rep := &Report{
		Target: o.Target, Protocol: o.Protocol, Session: o.Session,
		Arrival: o.Arrival, Rate: o.Rate, Seed: o.Seed, Errors: map[string]int64{},
	}
	payloads := o.Payloads
	slo := o.SLO
	if len(payloads) == 0 || slo == 0 {
		md, err := t.metadata(ctx)
		if err != nil {
			rep.Notes = append(rep.Notes, "model metadata: "+err.Error())
		}
		if slo == 0 {
			slo = md.slo
		}
		if len(payloads) == 0 {
			p, perr := ZeroPayload(md.inputs)
			if err != nil || perr != nil {
				p = fallbackPayload()
				if err == nil {
					rep.Notes = append(rep.Notes, "model metadata: "+perr.Error())
				}
			}
			payloads = []Payload{p}
		}
	}
	if slo == 0 {
		rep.Notes = append(rep.Notes, "no SLO: give --slo, or a gateway whose model metadata has parameters.slo_ms; attainment n/a")
	}
	for _, p := range payloads {
		rep.Inputs = append(rep.Inputs, p.Source)
	}
	if gt, ok := t.(*grpcTransport); ok {
		gt.prepare(payloads)
	}

	n := scheduleLen(o)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &run{t: t, payloads: payloads, ctx: runCtx, results: make([]atomic.Uint64, n)}

	stopBar := startProgress(o.Progress, int64(n), &r.finished)
	start := time.Now()
	sent, late, maxLag := r.schedule(o, start, n)
	rep.Interrupted = sent < n

	// Drain: wait for the outstanding replies, at most o.Drain.
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	drain := time.NewTimer(o.Drain)
	abandoned := kindTimeout
	select {
	case <-done:
	case <-drain.C:
	case <-ctx.Done():
		abandoned = kindCanceled
		rep.Interrupted = true
	}
	drain.Stop()
	end := time.Now()
	for k := 0; k < sent; k++ {
		r.record(k, abandoned, 0)
	}
	cancel() // abandoned gRPC calls stop now; their late outcomes lose the CAS
	stopBar()

	elapsed := end.Sub(start)
	if !rep.Interrupted {
		elapsed = max(elapsed, o.Duration) // the window is at least the sending time
	}
	rep.fill(r.results[:sent], slo, o.Duration, elapsed)
	if o.PerSecond {
		rep.perSecond(r.results[:sent], dueTimes(o, sent), slo)
	}
	rep.LateSends = late
	rep.MaxSendLagMs = ms(maxLag)
	return rep, nil
}

func (o *Options) spec() arrival.Spec {
	return arrival.Spec{Kind: o.Arrival, Rate: o.Rate, CV2: o.CV2, MMPP: o.MMPP, Trace: o.Trace, Registry: o.Arrivals}
}

// ownRate reports whether o.Arrival takes its rate from its own parameters
// (arrival.Kind.OwnRate: mmpp, trace); false for an unknown name.
func (o *Options) ownRate() bool {
	k, err := arrival.Lookup(o.Arrivals, o.Arrival)
	return err == nil && k.OwnRate()
}

// scheduleLen counts the arrivals in [0, o.Duration): the first is at 0, each
// next one a gap later. The process is seeded, so schedule replays the same times.
func scheduleLen(o Options) int {
	p, _ := o.spec().New(o.Seed)
	n := 0
	for at := time.Duration(0); at < o.Duration; n++ {
		gap := p.Next()
		if gap >= o.Duration-at { // also a trace's end (arrival.Never), without overflow
			return n + 1
		}
		at += gap
	}
	return n
}

// dueTimes returns the first n due times of the schedule, from its start
// (the times schedule releases the requests at).
func dueTimes(o Options, n int) []time.Duration {
	p, _ := o.spec().New(o.Seed)
	due := make([]time.Duration, n)
	at := time.Duration(0)
	for k := range due {
		due[k] = at
		at += p.Next()
	}
	return due
}

// schedule releases the n requests at start + Σ gaps and returns how many it
// released (fewer only when the run was canceled), how many went out later than
// LateSendThreshold, and the worst lag.
func (r *run) schedule(o Options, start time.Time, n int) (sent int, late int64, maxLag time.Duration) {
	p, _ := o.spec().New(o.Seed)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	limit := int64(o.MaxInflight)
	at := time.Duration(0)
	for k := 0; k < n; k, at = k+1, at+p.Next() {
		now := time.Now()
		if wait := at - now.Sub(start); wait > 0 {
			timer.Reset(wait)
			select {
			case now = <-timer.C:
			case <-r.ctx.Done():
				return k, late, maxLag
			}
		} else if r.ctx.Err() != nil {
			return k, late, maxLag
		}
		if lag := now.Sub(start) - at; lag > LateSendThreshold {
			late++
			maxLag = max(maxLag, lag)
		}
		if r.inflight.Add(1) > limit {
			r.inflight.Add(-1)
			r.record(k, kindDropped, 0)
			continue
		}
		r.wg.Add(1)
		go r.send(k, now)
	}
	return n, late, maxLag
}

// startProgress draws a bar of total requests on w, refreshed from finished
// every 200 ms; the returned func stops it. A nil w draws nothing.
func startProgress(w io.Writer, total int64, finished *atomic.Int64) (stop func()) {
	if w == nil {
		return func() {}
	}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("requests"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("req"),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
	)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				_ = bar.Set64(finished.Load())
			case <-quit:
				_ = bar.Set64(finished.Load())
				_ = bar.Finish()
				return
			}
		}
	}()
	return func() { close(quit); wg.Wait() }
}
