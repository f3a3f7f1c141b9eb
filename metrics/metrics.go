package metrics

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/piccolo-serving/piccolo/api"
)

// Metrics are the gateway's Prometheus metrics (docs/observability.md lists them
// all with the queries the dashboard uses).
//
// Per request (children resolved up front, so a request only does atomic adds):
//
//	piccolo_gateway_requests_total{session, protocol, code}   requests answered, by HTTP status
//	piccolo_gateway_request_seconds{session}                  end-to-end latency of successful requests
//	piccolo_gateway_slo_violations_total{session}             requests not answered successfully within the SLO
//	piccolo_gateway_admission_rejections_total{session}       requests refused by admission control (429)
//
// Per module item and batch (LiveOptions.Metrics; resolved in NewLiveRunner):
//
//	piccolo_gateway_module_queue_seconds{session, module}     submission → its batch started
//	piccolo_gateway_module_compute_seconds{session, module}   its batch's run on the backend, network included
//	piccolo_gateway_batch_size{session, module}               items + dummies of each batch sent
//
// Per plan (SetPlan, SetMembership; the embedded re-planner's):
//
//	piccolo_plan_cost, piccolo_plan_session_cost{session}, piccolo_plan_session_slo_seconds{session},
//	piccolo_plan_module_budget_seconds, piccolo_plan_module_wcl_seconds{session, module},
//	piccolo_plan_module_rate{session, module, kind="request"|"dummy"},
//	piccolo_plan_machines{session, module, hardware}, piccolo_plan_timestamp_seconds,
//	piccolo_plan_age_seconds, piccolo_plan_replans_total{cause}, piccolo_planner_seconds,
//	piccolo_membership_backends{hardware}, piccolo_membership_stale (1 while the
//	membership source is unreachable and the last members are served)
//
// Per published plan, with Consul (SetPlanSource):
//
//	piccolo_plan_version (the cluster plan's version; absent without Consul),
//	piccolo_plan_scheduler_info{scheduler} 1 (the scheduler that published it)
//
// Label sets are bounded by the config: sessions, modules, hardware types, the
// statuses the gateway answers with and the causes in ReplanCauses. Requests to
// sessions the gateway does not serve count under session "".
type Metrics struct {
	requests   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	violations *prometheus.CounterVec
	rejections *prometheus.CounterVec
	queue      *prometheus.HistogramVec
	compute    *prometheus.HistogramVec
	batchSize  *prometheus.HistogramVec
	fanOut     *prometheus.HistogramVec
	table      atomic.Pointer[map[string]*sessionMetrics]
	handler    fasthttp.RequestHandler

	planMu         sync.Mutex
	planCost       prometheus.Gauge
	planTimestamp  prometheus.Gauge
	planAt         atomic.Int64 // unix ns of the last SetPlan; 0: none
	planRuntime    prometheus.Histogram
	replans        *prometheus.CounterVec
	sessionCost    *prometheus.GaugeVec
	sessionSLO     *prometheus.GaugeVec
	moduleBudget   *prometheus.GaugeVec
	moduleWCL      *prometheus.GaugeVec
	moduleRate     *prometheus.GaugeVec
	machines       *prometheus.GaugeVec
	membership     *prometheus.GaugeVec
	membershipSeen map[string]bool
	desired        *prometheus.GaugeVec
	available      *prometheus.GaugeVec
	capacitySeen   map[string]bool
	desiredBy      map[string]int // the last SetCapacity's
	availableBy    map[string]int // the last SetMembership's counts
	stale          prometheus.Gauge
	planVersion    *prometheus.GaugeVec // no labels: absent until SetPlanSource
	planScheduler  *prometheus.GaugeVec

	// Per request, apart (kserve's recovers and in-flight budget).
	panics          *prometheus.CounterVec
	inflightBytes   prometheus.Gauge
	inflightRefused prometheus.Counter
}

type sessionMetrics struct {
	codes      [2]map[int]prometheus.Counter // by protocol: 0 HTTP, 1 gRPC
	latency    prometheus.Observer
	slo        time.Duration // 0: none
	violations prometheus.Counter
	rejections prometheus.Counter
}

// metricCodes are the statuses the gateway answers with.
var metricCodes = []int{200, 400, 404, 405, 413, 429, 499, 500, 502, 503, 504}

// PanicPlaces are the values of piccolo_gateway_panics_total's where label.
var PanicPlaces = []string{"http", "grpc", "module", "batch", "timer", "goroutine"}

// ReplanCauses are the values of piccolo_plan_replans_total's cause label:
// the first plan, a change of measured rates, of membership, of the config, an
// operator's request, the control loop's periodic re-plan, a drift of the
// measured durations from the profiles (docs/calibration.md), the Tuner's
// scaling (no planner run), two models found slowing each other on a
// shared device (docs/calibration.md, "Co-location"), or a fan-out's
// measured distribution needing another number of batches than planned
// (docs/planner.md, "Fan-out as a distribution").
var ReplanCauses = []string{"initial", "rate", "membership", "config", "manual", "periodic", "drift", "tune", "colocation", "fanout"}

// latencyBuckets are the buckets of every latency histogram, in seconds: 1 ms
// to about 16 s, doubling.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// NewMetrics registers the gateway's metrics on reg and serves reg's metrics.
// It fails when reg already holds metrics of the same names.
func NewMetrics(reg *prometheus.Registry) (*Metrics, error) {
	sm := []string{"session", "module"}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: GatewayRequestsTotal,
			Help: "Inference requests answered, by session, protocol and HTTP status (gRPC codes mapped to the same)."},
			[]string{"session", "protocol", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: GatewayRequestSeconds,
			Help:    "End-to-end latency of successful inference requests, in seconds.",
			Buckets: latencyBuckets}, []string{"session"}),
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: GatewaySLOViolationsTotal,
			Help: "Requests not answered successfully within the session's SLO: late answers, deadline misses (504), admission rejections (429) and failures (502, 503). Client errors do not count."},
			[]string{"session"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: GatewayAdmissionRejectionsTotal,
			Help: "Requests refused at once by admission control because their deadline could not be met (HTTP 429, gRPC RESOURCE_EXHAUSTED)."},
			[]string{"session"}),
		queue: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: GatewayModuleQueueSeconds,
			Help: "Time a module item waited from submission until its batch started on a backend, in seconds.", Buckets: latencyBuckets}, sm),
		compute: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: GatewayModuleComputeSeconds,
			Help: "Run time of a module item's batch on its backend, network included, in seconds.", Buckets: latencyBuckets}, sm),
		batchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: GatewayBatchSize,
			Help:    "Items plus dummies of each batch a module sent to a backend.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}}, sm),
		fanOut: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: GatewayFanOutItems,
			Help:    "Items a fan-out module got from one item of its parent (0: skipped): the distribution a session's fanout gives the planner (docs/planner.md, \"Fan-out as a distribution\").",
			Buckets: fanOutBuckets}, sm),

		planCost: prometheus.NewGauge(prometheus.GaugeOpts{Name: PlanCost,
			Help: "Total cost of the current plan, in cost units per hour (Σ machines × price)."}),
		planTimestamp: prometheus.NewGauge(prometheus.GaugeOpts{Name: PlanTimestampSeconds,
			Help: "Unix time at which the current plan was made."}),
		planRuntime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: PlannerSeconds,
			Help: "Planner runtime per plan, in seconds.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
		replans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: PlanReplansTotal,
			Help: "Plans made, by cause: initial, rate, membership, config, manual, periodic."}, []string{"cause"}),
		sessionCost: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: PlanSessionCost,
			Help: "Cost of a session's plan, in cost units per hour."}, []string{"session"}),
		sessionSLO: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: PlanSessionSLOSeconds,
			Help: "End-to-end latency objective of a session, in seconds."}, []string{"session"}),
		moduleBudget: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: PlanModuleBudgetSeconds,
			Help: "Latency budget the splitter gave a module (Algorithm 2), in seconds."}, sm),
		moduleWCL: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: PlanModuleWCLSeconds,
			Help: "Planned worst-case latency of a module (Theorem 1), in seconds."}, sm),
		moduleRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: PlanModuleRate,
			Help: "Planned arrival rate of a module in requests per second, by kind: request (what the plan expects from clients) or dummy (§III-D)."},
			[]string{"session", "module", "kind"}),
		machines: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: PlanMachines,
			Help: "Machines the plan gives a module on a hardware type (fractional: occupancy)."}, []string{"session", "module", "hardware"}),
		membership: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MembershipBackends,
			Help: "Backends the gateway knows, by hardware type."}, []string{"hardware"}),
		membershipSeen: map[string]bool{},
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: CapacityDesiredMachines,
			Help: "Machines (devices) of a hardware type the current plan needs once placed, whether or not the pool has them: what an autoscaler should provide."}, []string{"hardware"}),
		available: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: CapacityAvailableMachines,
			Help: "Machines (backends) of a hardware type in the pool, as piccolo_membership_backends counts them."}, []string{"hardware"}),
		capacitySeen: map[string]bool{},
		planVersion: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: PlanVersion,
			Help: "Version of the cluster plan served (Consul KV record; absent without Consul)."}, nil),
		planScheduler: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: PlanSchedulerInfo,
			Help: "1 for the scheduler that published the cluster plan served (absent without Consul)."}, []string{"scheduler"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: GatewayPanicsTotal,
			Help: "Panics recovered while serving requests, by where they were recovered; each request answered 500 (gRPC INTERNAL)."}, []string{"where"}),
		inflightBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: GatewayInflightBytes,
			Help: "Request body bytes held by the requests in flight (the in-flight budget, --max-inflight-bytes)."}),
		inflightRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: GatewayInflightRefusedTotal,
			Help: "Requests refused because the in-flight bytes budget was full (HTTP 503 with Retry-After, gRPC RESOURCE_EXHAUSTED)."}),
		stale: prometheus.NewGauge(prometheus.GaugeOpts{Name: MembershipStale,
			Help: "1 while the membership source (Consul) is unreachable and the gateway serves the last members it saw, else 0."}),
	}
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: PlanAgeSeconds,
		Help: "Seconds since the current plan was made (0 before the first plan)."}, func() float64 {
		at := m.planAt.Load()
		if at == 0 {
			return 0
		}
		return time.Since(time.Unix(0, at)).Seconds()
	})
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.violations, m.rejections, m.queue, m.compute, m.batchSize, m.fanOut,
		m.planCost, m.planTimestamp, m.planRuntime, m.replans, m.sessionCost, m.sessionSLO, m.moduleBudget, m.moduleWCL,
		m.moduleRate, m.machines, m.membership, m.desired, m.available, m.stale, m.planVersion, m.planScheduler, m.panics, m.inflightBytes, m.inflightRefused, age} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	for _, c := range ReplanCauses {
		m.replans.WithLabelValues(c)
	}
	for _, w := range PanicPlaces {
		m.panics.WithLabelValues(w)
	}
	m.handler = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m.setSessions(nil, nil)
	return m, nil
}

// Handler serves GET /metrics: the registry's metrics in Prometheus text.
func (m *Metrics) Handler(ctx *fasthttp.RequestCtx) { m.handler(ctx) }

// Sessions is what SetDAGRunner reads of the sessions served: the session
// names and each one's config (for its SLO). *gateway.DAGRunner is one;
// the interface keeps metrics below gateway in the import order.
type Sessions interface {
	Sessions() []string
	Session(name string) (api.Session, bool)
}

// SetDAGRunner resolves the per-session children (and the SLO that counts a
// violation) of the DAGRunner's sessions (e, a *gateway.DAGRunner in the
// gateway). kserve.NewServer calls it; whoever changes the DAGRunner's
// sessions afterwards (EmbeddedControl, the cluster follower) calls it again
// after DAGRunner.SetSessions.
func (m *Metrics) SetDAGRunner(e Sessions) {
	names := e.Sessions()
	slos := make(map[string]time.Duration, len(names))
	for _, n := range names {
		if s, ok := e.Session(n); ok {
			slos[n] = time.Duration(s.SLO)
		}
	}
	m.setSessions(names, slos)
}

func (m *Metrics) setSessions(names []string, slos map[string]time.Duration) {
	t := make(map[string]*sessionMetrics, len(names)+1)
	for _, n := range append([]string{""}, names...) {
		sm := &sessionMetrics{latency: m.latency.WithLabelValues(n), slo: slos[n],
			violations: m.violations.WithLabelValues(n), rejections: m.rejections.WithLabelValues(n)}
		for p, proto := range []string{"http", "grpc"} {
			sm.codes[p] = make(map[int]prometheus.Counter, len(metricCodes))
			for _, c := range metricCodes {
				sm.codes[p][c] = m.requests.WithLabelValues(n, proto, strconv.Itoa(c))
			}
		}
		t[n] = sm
	}
	m.table.Store(&t)
}

// Panic counts one panic recovered at where (one of PanicPlaces; another
// value gets its own series). Not on the success path.
func (m *Metrics) Panic(where string) {
	if m == nil {
		return
	}
	m.panics.WithLabelValues(where).Inc()
}

// InflightBytes sets the bytes the requests in flight hold; refused counts a
// request the budget refused. Both are nil-safe.
func (m *Metrics) InflightBytes(n int64) {
	if m != nil {
		m.inflightBytes.Set(float64(n))
	}
}

// InflightRefused counts one request refused because the in-flight budget
// was full.
func (m *Metrics) InflightRefused() {
	if m != nil {
		m.inflightRefused.Inc()
	}
}

// Observe counts one answered request; grpc selects the protocol label.
func (m *Metrics) Observe(session string, grpc bool, status int, took time.Duration) {
	if m == nil {
		return
	}
	t := *m.table.Load()
	sm, ok := t[session]
	if !ok {
		sm = t[""]
	}
	p := 0
	if grpc {
		p = 1
	}
	c, ok := sm.codes[p][status]
	if !ok {
		c = sm.codes[p][http.StatusBadGateway]
	}
	c.Inc()
	switch status {
	case http.StatusOK:
		sm.latency.Observe(took.Seconds())
		if sm.slo > 0 && took > sm.slo {
			sm.violations.Inc()
		}
	case http.StatusTooManyRequests:
		sm.rejections.Inc()
		sm.violations.Inc()
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		sm.violations.Inc()
	}
}

// fanOutBuckets are piccolo_gateway_fanout_items' buckets: every count from 0
// to 16 (a bucket's count less the one before it is how often exactly that
// many items came, what a session's fanout lists), then coarser up to
// api.MaxFanOutItems.
var fanOutBuckets = append(prometheus.LinearBuckets(0, 1, 17), 24, 32, 48, 64, 128, 256, 512, 1000)

// ModuleMetrics are one module's resolved children; a nil *ModuleMetrics
// records nothing.
type ModuleMetrics struct {
	queue, compute, batchSize, fanOut prometheus.Observer
}

// Module resolves the children of one module; nil when m is nil.
func (m *Metrics) Module(session, module string) *ModuleMetrics {
	if m == nil {
		return nil
	}
	return &ModuleMetrics{queue: m.queue.WithLabelValues(session, module), compute: m.compute.WithLabelValues(session, module),
		batchSize: m.batchSize.WithLabelValues(session, module), fanOut: m.fanOut.WithLabelValues(session, module)}
}

// Item records one item's timing (only items that were sent): queue from
// submission until its batch started on a backend, compute the batch's run
// (gateway.Timing's two fields).
func (mm *ModuleMetrics) Item(queue, compute time.Duration) {
	if mm == nil {
		return
	}
	mm.queue.Observe(queue.Seconds())
	mm.compute.Observe(compute.Seconds())
}

// Batch records the size of one batch sent: real items plus dummies.
func (mm *ModuleMetrics) Batch(size int) {
	if mm == nil {
		return
	}
	mm.batchSize.Observe(float64(size))
}

// FanOut records one fan-out: the module got items items from one item of
// its parent (gateway.FanOutObserver).
func (mm *ModuleMetrics) FanOut(items int) {
	if mm == nil {
		return
	}
	mm.fanOut.Observe(float64(items))
}

// SetPlan records a new plan: its cost, per-session and per-module targets,
// the time it was made (now), the planner's runtime took, and one re-plan of
// cause (one of ReplanCauses; anything else is an error and nothing is recorded).
// Called by whoever plans (the embedded re-planner), from any goroutine.
func (m *Metrics) SetPlan(plan *api.Plan, cause string, took time.Duration) error {
	if m == nil || plan == nil {
		return nil
	}
	known := false
	for _, c := range ReplanCauses {
		known = known || c == cause
	}
	if !known {
		return fmt.Errorf("metrics: re-plan cause %q; allowed: %v", cause, ReplanCauses)
	}
	m.planMu.Lock()
	defer m.planMu.Unlock()
	for _, v := range []interface{ Reset() }{m.sessionCost, m.sessionSLO, m.moduleBudget, m.moduleWCL, m.moduleRate, m.machines} {
		v.Reset()
	}
	m.planCost.Set(plan.TotalCost)
	for _, sp := range plan.Sessions {
		m.sessionSLO.WithLabelValues(sp.Name).Set(sp.SLOMs / 1000)
		if sp.Error != "" {
			continue
		}
		m.sessionCost.WithLabelValues(sp.Name).Set(sp.Cost)
		for _, mp := range sp.Modules {
			m.moduleBudget.WithLabelValues(sp.Name, mp.Name).Set(mp.BudgetMs / 1000)
			m.moduleWCL.WithLabelValues(sp.Name, mp.Name).Set(mp.WCLMs / 1000)
			m.moduleRate.WithLabelValues(sp.Name, mp.Name, "request").Set(mp.Rate)
			m.moduleRate.WithLabelValues(sp.Name, mp.Name, "dummy").Set(mp.DummyRate)
			for _, g := range mp.Configs {
				m.machines.WithLabelValues(sp.Name, mp.Name, g.Hardware).Add(g.Machines)
			}
		}
	}
	now := time.Now()
	m.planAt.Store(now.UnixNano())
	m.planTimestamp.Set(float64(now.UnixNano()) / 1e9)
	m.planRuntime.Observe(took.Seconds())
	m.replans.WithLabelValues(cause).Inc()
	return nil
}

// SetPlanSource records which cluster plan the gateway serves: its version
// and the scheduler that published it (cluster.Record). Called by the cluster
// follower for each record it serves, including a new leader's re-publication
// of the plan already live.
func (m *Metrics) SetPlanSource(version uint64, scheduler string) {
	if m == nil {
		return
	}
	m.planVersion.WithLabelValues().Set(float64(version))
	m.planScheduler.Reset()
	m.planScheduler.WithLabelValues(scheduler).Set(1)
}

// SetMembershipStale sets piccolo_membership_stale: true while the membership
// source is unreachable and the last members it gave are served.
func (m *Metrics) SetMembershipStale(stale bool) {
	if m == nil {
		return
	}
	v := 0.0
	if stale {
		v = 1
	}
	m.stale.Set(v)
}

// SetMembership records the backends the gateway knows, counted by hardware
// type; a hardware type seen before and now without backends reads 0.
func (m *Metrics) SetMembership(list []api.Backend) {
	if m == nil {
		return
	}
	m.planMu.Lock()
	defer m.planMu.Unlock()
	count := map[string]int{}
	for _, b := range list {
		count[b.Hardware]++
		m.membershipSeen[b.Hardware] = true
	}
	hw := make([]string, 0, len(m.membershipSeen))
	for h := range m.membershipSeen {
		hw = append(hw, h)
	}
	sort.Strings(hw)
	for _, h := range hw {
		m.membership.WithLabelValues(h).Set(float64(count[h]))
	}
	m.availableBy = count
	m.setCapacityLocked()
}

// SetCapacity records the machines (devices) of each hardware type the plan
// needs once placed, whether or not the pool has them
// (piccolo_capacity_desired_machines): what an autoscaler should provide.
// piccolo_capacity_available_machines is the pool's count of each type, kept
// by SetMembership. A hardware type seen before and now absent reads 0.
func (m *Metrics) SetCapacity(desired map[string]int) {
	if m == nil {
		return
	}
	m.planMu.Lock()
	defer m.planMu.Unlock()
	m.desiredBy = desired
	m.setCapacityLocked()
}

// setCapacityLocked writes both capacity gauges for every hardware type seen
// in a plan or the pool. Call with planMu held.
func (m *Metrics) setCapacityLocked() {
	for h := range m.desiredBy {
		m.capacitySeen[h] = true
	}
	for h := range m.availableBy {
		m.capacitySeen[h] = true
	}
	for h := range m.capacitySeen {
		m.desired.WithLabelValues(h).Set(float64(m.desiredBy[h]))
		m.available.WithLabelValues(h).Set(float64(m.availableBy[h]))
	}
}

var (
	// Desc* describe the dispatchers' metrics, which dataplane.LiveRunner collects at scrape time.
	DescItems = prometheus.NewDesc(DispatcherItemsTotal,
		"Items of a module's dispatcher by outcome: submitted, completed, failed, deadline_on_submit, deadline_on_send, cancelled (abandoned by their request before they were sent: never computed), dropped (abandoned while their batch ran: computed, result discarded). The rate of submitted is the module's measured arrival rate.",
		[]string{"session", "module", "outcome"}, nil)
	DescClassItems = prometheus.NewDesc(DispatcherClassItemsTotal,
		"Items of a module's dispatcher by priority class (high, normal, low) and outcome: submitted (admitted), overloaded (refused by admission).",
		[]string{"session", "module", "class", "outcome"}, nil)
	DescDummies = prometheus.NewDesc(DispatcherDummiesTotal,
		"Dummy arrivals of a module (§III-D): injected, dropped (their batch held no real item).",
		[]string{"session", "module", "outcome"}, nil)
	slotLabels = []string{"session", "module", "slot", "backend", "hardware"}
	// DescOccupied is GatewayOccupiedMachineSecondsTotal.
	DescOccupied = prometheus.NewDesc(GatewayOccupiedMachineSecondsTotal,
		"Machine-seconds a module's batches occupied on a hardware type: each slot's busy lane-seconds (sent → done) over its lanes, summed over every plan served since start, so it does not restart when the plan changes. Times the hardware's price over the window, the module's occupied cost in cost units per second.",
		[]string{"session", "module", "hardware"}, nil)
	// DescDevice is GatewayDeviceMachineSecondsTotal.
	DescDevice = prometheus.NewDesc(GatewayDeviceMachineSecondsTotal,
		"Machine-seconds of device time in a module's batches on a hardware type: the compute time each backend reported with its answer over the slot's lanes, summed over every plan served since start. The part of piccolo_gateway_occupied_machine_seconds_total the device ran; the rest is the round trip and the backend's queue. Batches whose backend reports no time are not counted.",
		[]string{"session", "module", "hardware"}, nil)
	DescClosed = prometheus.NewDesc(DispatcherBatchesClosedTotal,
		"Batches with a real item a module closed for dispatch, by what closed them: full (the group's batch size), deadline (the deadline flush), idle (--flush idle: an idle machine).",
		[]string{"session", "module", "closer"}, nil)
	DescBatches = prometheus.NewDesc(DispatcherBatchesTotal,
		"Batches sent to a slot (machine) of a module's plan; slot is g<group>m<machine>, or spare<i> for a spare machine.", slotLabels, nil)
	DescSlotItems = prometheus.NewDesc(DispatcherSlotItemsTotal,
		"Real items sent to a slot in its batches.", slotLabels, nil)
	DescSlotDummies = prometheus.NewDesc(DispatcherSlotDummiesTotal,
		"Dummy items sent to a slot in its batches (§III-D).", slotLabels, nil)
	DescSlotBusy = prometheus.NewDesc(DispatcherSlotBusySecondsTotal,
		"Lane-seconds a slot spent running finished batches; its rate divided by piccolo_dispatcher_slot_lanes is the slot's utilisation.", slotLabels, nil)
	DescSlotLanes = prometheus.NewDesc(DispatcherSlotLanes,
		"Lanes (concurrency) of a slot under the current plan.", slotLabels, nil)
	DescSlotRate = prometheus.NewDesc(DispatcherSlotPlannedRate,
		"Planned request rate of a slot, dummies included, in requests per second.", slotLabels, nil)
	DescOverflow = prometheus.NewDesc(DispatcherOverflowBatchesTotal,
		"Batches of a module sent to a spare machine (a backend of the pool its plan leaves idle, gateway --spare) because every machine of their group was busy, or the one chosen was idle but slower than planned (its pace or straggler slowness) while another of the group was faster, and they would have completed late there: to the spare that completed them in time, or, when none could, sooner than there.",
		[]string{"session", "module"}, nil)
	DescLateCommitted = prometheus.NewDesc(DispatcherLateCommittedBatchesTotal,
		"Batches of a module sent to an idle machine of another of its planned groups, which ended them in time, because the machine their own group chose would have ended them late (Llama's late commit, gateway --late-commit).",
		[]string{"session", "module"}, nil)
	DescLocal = prometheus.NewDesc(DispatcherLocalBatchesTotal,
		"Batches of a module sent to a free machine on the backend holding their items' inputs (locality, gateway --locality-bytes), where they name the held inputs instead of sending them.",
		[]string{"session", "module"}, nil)
	DescOutstanding = prometheus.NewDesc(GatewayModuleOutstanding,
		"Items submitted to a module and not yet done (what admission control reads).", []string{"session", "module"}, nil)
)

// Desc* of the gateway's fault handling, which dataplane.Health collects at
// scrape time (docs/faults.md, "Retry, ejection and hedging").
var (
	DescRetries = prometheus.NewDesc(GatewayRetriesTotal,
		"Batches re-sent to another machine after their call failed, by the failure: not_executed (the backend never got the call: refused), transport (the connection broke or the backend said UNAVAILABLE), model_not_loaded, failed (the backend answered an error or a malformed output).",
		[]string{"reason"}, nil)
	DescHedges = prometheus.NewDesc(GatewayHedgesTotal,
		"Batches sent a second time to another machine because the first call ran past twice its profiled duration (competitive execution), by outcome: won (the hedge answered first), lost (the first call did).",
		[]string{"outcome"}, nil)
	DescHedgeSeconds = prometheus.NewDesc(GatewayHedgeSecondsTotal,
		"Machine time the hedged calls ran, from their start until the first answer (then the other call is cancelled): the extra machine time hedging used.", nil, nil)
	DescRaces = prometheus.NewDesc(GatewayRacesTotal,
		"Batches of raced modules (race: k, Cloudflow's competitive execution) sent to k machines at once, by outcome: won (a copy answered first), lost (the dispatcher's own machine did).",
		[]string{"outcome"}, nil)
	DescRaceSeconds = prometheus.NewDesc(GatewayRaceSecondsTotal,
		"Machine time the race copies ran, from their start until the first answer (then the others are cancelled): the extra machine time racing used.", nil, nil)
	DescBatchesSent = prometheus.NewDesc(GatewayBatchesSentTotal,
		"Calls of batches to backends (first tries; retries and hedges not included): the denominator of the hedge budget.", nil, nil)
	DescBackendUp = prometheus.NewDesc(GatewayBackendUp,
		"1 when the backend is in the dispatch table, 0 while it is ejected (a transport failure or a failed health probe) until a probe passes.",
		[]string{"backend"}, nil)
	DescBackendSlowness = prometheus.NewDesc(GatewayBackendSlowness,
		"Exponentially weighted mean of the backend's measured batch durations over their profiled durations (1: as profiled); from 1.5 the backend counts as a straggler and gets fewer batches.",
		[]string{"backend"}, nil)
	DescBackendEjections = prometheus.NewDesc(GatewayBackendEjectionsTotal,
		"Times the backend was taken out of the dispatch table.", []string{"backend"}, nil)
	DescBackendHostSeconds = prometheus.NewDesc(GatewayBackendHostSeconds,
		"Exponentially weighted mean of the network-and-host share of the backend's batches: the gateway's round trip less the queue and compute time the backend reported with the answer (0: the backend reports none). Calibration, pace and stragglers learn from the backend's time, not from this.",
		[]string{"backend"}, nil)
)

// LeaderGauge is piccolo_replanner_leader, and under its former name
// piccolo_scheduler_leader for a release: 1 while leading() (the cluster's
// elected re-planner: cluster.Replanner.Leading), else 0.
func LeaderGauge(leading func() bool) prometheus.Collector {
	value := func() float64 {
		if leading() {
			return 1
		}
		return 0
	}
	return leaderGauges{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: ReplannerLeader,
			Help: "1 when this process is the cluster's elected re-planner, else 0 (--consul)."}, value),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: SchedulerLeader,
			Help: "Deprecated: piccolo_replanner_leader's former name, served beside it for a release."}, value),
	}
}

// leaderGauges is the leader gauge under both its names, one collector.
type leaderGauges [2]prometheus.GaugeFunc

func (g leaderGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range g {
		c.Describe(ch)
	}
}

func (g leaderGauges) Collect(ch chan<- prometheus.Metric) {
	for _, c := range g {
		c.Collect(ch)
	}
}
