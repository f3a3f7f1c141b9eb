// Package demo is `piccolo demo`: the main job on its embedded default. It starts,
// as child processes of one process tree on loopback, the backends a plan needs and
// a gateway over them, drives every planned session with open-loop Poisson load at
// its planned rate, prints per session what a user checks (throughput, p50/p99
// latency, SLO attainment, the plan's cost beside the round-robin baseline's), writes
// latency plots, and shuts everything down.
//
// Hardware types named cpu-... run real backends (executor "ocr": ONNX Runtime and
// the Go processing modules; cpu-<N>t with N intra-op threads); every other type
// runs the "sim" executor, which emulates the type from its profiles. A session
// whose source module runs ocr-pre is sent the OCR test images (internal/ocrsamples)
// over gRPC, and the demo reports its word accuracy; a session with model
// variants (docs/variants.md) is sent the hard set instead, on which its
// accuracy target is defined, and the demo prints the variants the plan chose
// and the target beside the accuracy measured. Run is called once, from the
// command's goroutine.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/configs"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/evaluation"
	"github.com/piccolo-serving/piccolo/loadgen"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/planner"
	"github.com/piccolo-serving/piccolo/serving"
)

// Options configure a demo run.
type Options struct {
	// Files are config files; empty runs the embedded default (configs.Demo).
	Files []string
	// Duration is how long each session is loaded (default 60s).
	Duration time.Duration
	// Serve keeps everything running after the load, until ctx ends.
	Serve bool
	// OutDir receives the latency plots and the processes' logs (default out/demo).
	OutDir string
	// GatewayArgs are more arguments for the demo's `piccolo gateway`, after
	// its own (e.g. "--slack=0"): to try a gateway setting on the demo's
	// sessions. The gateway rejects what it does not know.
	GatewayArgs []string
	// Binary is the piccolo executable to start children from (default: this one).
	Binary string
	// MaxBackendsPerType caps the backend processes of one hardware type; planned
	// machines beyond it share backends (default 6).
	MaxBackendsPerType int
	// MaxUtilization is the planner's headroom (0: its default).
	MaxUtilization float64
	// Policy is the planning policy the demo plans and its gateway serves
	// with (gateway --policy; default piccolo): one of DemoPolicies. The
	// baselines of Table III are served with round-robin dispatch, as their
	// latency models assume (evaluation.Variant.RoundRobin).
	Policy string
	// NoSpares starts only the planned devices: no idle spare backends of
	// the emulated types (simSpares).
	NoSpares bool
	// NoSpread starts only the one-lane CPU devices (cpu-<N>t) the plan
	// packs onto: no more for the gateway to spread its fractions over
	// (oneLaneDevices), so that their models share one lane as before.
	NoSpread bool
	// NoFusion plans and serves every module as configured (gateway
	// --no-fusion); by default chains with a cheaper fused profile are fused
	// (planner.Fuse, docs/fusion.md).
	NoFusion bool
	// NoHostProfile plans from the config's profiles as written; by default
	// the CPU models' profiles are this host's (hostprofile.go): measured by
	// a profile of seconds on the backends the demo starts, or read from
	// CalibrationFile when it holds every CPU model of the plan.
	NoHostProfile bool
	// Reprofile profiles the CPU models even when CalibrationFile holds
	// them (and forgets the file).
	Reprofile bool
	// CalibrationFile is this host's calibration: read at the start, and the
	// gateway's --calibration-file, which it writes every 10 s and on
	// shutdown (default <OutDir>/calibration-<hostname>.json).
	CalibrationFile string
	// Out receives the report; Log receives progress lines.
	Out, Log io.Writer
}

// ShortType is a hardware type the plan needs more devices of (Needed) than
// the demo started (Started).
type ShortType struct {
	Hardware        string
	Needed, Started int
}

// Result is what a run measured, per session.
type Result struct {
	Sessions []SessionResult
	// PlanCost is the plan's total cost (fractional machines × price), Devices
	// the devices placement packs it onto, Backends the backend processes
	// started (Devices, less what MaxBackendsPerType capped, plus the idle
	// spares of the emulated types, simSpares, and Spread).
	PlanCost          float64
	Devices, Backends int
	Spares            int // of Backends, the idle spares (simSpares)
	// Short are the hardware types whose placed plan needs more devices
	// than the demo started (MaxBackendsPerType, spares included): the
	// gateway fits the plan to the pool and refuses the rest.
	Short []ShortType
	// Spread is, of Backends, the one-lane CPU devices started beyond
	// those the plan packs onto, for the gateway to spread the plan's
	// fractions over (oneLaneDevices).
	Spread int
	// Host is the accounting of the host's cores: what the plan's CPU
	// backends and the demo need, what was free, what each process used.
	Host *HostCPU
	// HostModels are the plan's CPU model entries, profiled (the config's)
	// and measured on this host (what the plan used); none with
	// NoHostProfile. CalibrationFile is where the gateway kept what it
	// learned, for the next run ("" with NoHostProfile).
	HostModels      []HostModel
	CalibrationFile string
	// DoorShed is how many requests the gateway's door refused (429) before
	// reading them, all sessions together, its own CPU saturated
	// (docs/traffic.md, "Overload control"); each session's Refusals.Door
	// has those the door could name it for. They are among the sessions'
	// "rejected: overloaded".
	DoorShed float64
}

// SessionResult is one session's figures.
type SessionResult struct {
	Name     string
	Rate     float64 // req/s offered
	Report   *loadgen.Report
	PlanCost float64
	// ChargedCost is what the session's plan is charged in the same
	// simulation the baseline's is (evaluation.Outcome.Cost: the larger of
	// its planned cost and the device time it occupied, over its cap); NaN if
	// it could not be simulated. The comparison with the baseline is made on
	// it: a plan whose model counts on batches that do not fill at the rate
	// (InferLine's rr-2d) plans cheaper than it occupies.
	ChargedCost float64
	// LiveChargedCost is ChargedCost measured live: the larger of the
	// planned cost and the gateway's occupancy (machine-seconds × price over
	// the load's duration, Refusals.Occupied) over the session's cap; NaN
	// when not measured. Live batches last their round trip (network and
	// this host's contention included), the simulated ones their profile.
	LiveChargedCost float64
	// LiveDeviceCost is LiveChargedCost with the device time the backends
	// reported (Refusals.Device) in place of the occupancy: what the session
	// is charged if each batch held its machine only while the device ran
	// it, as the simulation charges it. LiveChargedCost less it is the round
	// trip's and the backends' queues' share. NaN when not measured.
	LiveDeviceCost float64
	// Cap is the utilisation cap the session was planned at.
	Cap float64
	// SimAttainment is the simulated SLO attainment ChargedCost comes with.
	SimAttainment float64
	// BaselineCost is the round-robin baseline's (BaselinePolicy) charged
	// cost, as ChargedCost; NaN if none can plan.
	BaselineCost    float64
	BaselinePolicy  string
	Plot            string
	NotPlannedError string
	OCR             *OCRAccuracy // for an OCR session: the test images read back
	// For a session with model variants (docs/variants.md): the variant the
	// plan chose for each such module ("det ocr-det-480"), the accuracy target
	// it planned for and the plan's estimate (the product of the variants',
	// or, AccuracyJoint, the combination's measured joint accuracy).
	Variants                 []string
	AccuracyTarget, Accuracy float64
	AccuracyJoint            bool
	// Refusals is what the gateway measured of the session: its admission
	// refusals and its modules' durations against the plan's (nil: unread).
	Refusals *Refusals

	// BaselineAttainment is the baseline plan's simulated SLO attainment.
	BaselineAttainment float64
}

var cpuThreads = regexp.MustCompile(`^cpu-(\d+)t$`)

// DemoPolicies are the policies the demo serves (Options.Policy): the
// evaluation's systems (Piccolo, the paper's Piccolo and the four systems of
// Table III) but the optimum, which is a search, not a policy a gateway
// serves.
var DemoPolicies = slices.DeleteFunc(slices.Clone(evaluation.Systems), func(s string) bool { return s == "optimal" })

// roundRobin reports whether policy's plans are served with round-robin
// dispatch (evaluation.Variant.RoundRobin), as the evaluation simulates them.
func roundRobin(policy string) bool {
	for _, v := range evaluation.Variants(1) {
		if v.Name == policy {
			return v.RoundRobin
		}
	}
	return false
}

// Run runs the demo. It returns after the load (or, with Serve, when ctx ends),
// with every child process stopped.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Policy == "" {
		o.Policy = "piccolo"
	}
	if !slices.Contains(DemoPolicies, o.Policy) {
		return nil, fmt.Errorf("demo: policy %q: allowed: %s", o.Policy, strings.Join(DemoPolicies, ", "))
	}
	sv, err := servedBy(o.GatewayArgs) // before anything starts: a bad --flush is refused here
	if err != nil {
		return nil, err
	}
	if o.Duration <= 0 {
		o.Duration = 60 * time.Second
	}
	if o.OutDir == "" {
		o.OutDir = filepath.Join("out", "demo")
	}
	if o.MaxBackendsPerType <= 0 {
		o.MaxBackendsPerType = 6
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.Binary == "" {
		b, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("demo: cannot find the piccolo binary: %w", err)
		}
		o.Binary = b
	}
	logs := filepath.Join(o.OutDir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	files := o.Files
	if len(files) == 0 {
		var err error
		if files, err = writeEmbedded(filepath.Join(o.OutDir, "config")); err != nil {
			return nil, err
		}
	}
	cfg, err := api.Load(files...)
	if err != nil {
		return nil, err
	}
	offline := cfg // as loaded: unfused, the config's own profiles
	cfg, plan, err := fuseAndPlan(offline, o, sv, !o.NoHostProfile)
	if err != nil {
		return nil, err
	}
	// The CPU backends all run on this host: one capacity of cores, measured
	// free before the demo starts anything.
	hc := measureHost(time.Second)
	procs := &processes{}
	defer procs.stop(o.Log)
	type backend struct {
		id, hw string
		c      *child
	}
	var backends []backend
	var members []placement.Member
	started := map[string]int{} // backends started, by hardware type
	startBackend := func(hw string) (backend, error) {
		id := fmt.Sprintf("%s-%d", hw, started[hw])
		extra := []string{"--executor", "sim"}
		switch m := cpuThreads.FindStringSubmatch(hw); {
		case m != nil:
			// One device of N cores: one batch at a time across its models
			// (docs/ocr.md, "CPU backends share the host's cores").
			extra = []string{"--executor", "ocr", "--intra-op-threads", m[1], "--device-lanes", "1"}
		case strings.HasPrefix(hw, "cpu-"):
			extra = []string{"--executor", "ocr"}
		}
		// Two ports: gRPC and /metrics. The backend's default metrics port
		// (gRPC + 1000) lands in the ephemeral range, where another
		// process's socket may hold it, so the demo picks it too.
		c, err := procs.start(o.Binary, 2, func(addrs []string) []string {
			args := []string{"backend", "--listen", addrs[0], "--metrics-listen", addrs[1], "--hardware", hw, "--log", "console"}
			for _, f := range files {
				args = append(args, "-c", f)
			}
			return append(args, extra...)
		}, filepath.Join(logs, id+".log"))
		if err != nil {
			return backend{}, err
		}
		b := backend{id: id, hw: hw, c: c}
		backends = append(backends, b)
		members = append(members, placement.Member{ID: id, Hardware: hw})
		started[hw]++
		return b, nil
	}
	// The plan fits this host: the CPU models as measured here (a profile
	// on the backends just started, or the calibration kept from the last
	// run), not as the config's profiles (another machine's) say.
	var hostRows []HostModel
	gatewayFiles, calFile := files, ""
	if !o.NoHostProfile {
		calFile = o.CalibrationFile
		if calFile == "" {
			calFile = defaultCalibrationFile(o.OutDir)
		}
		entries := cpuEntries(plan)
		est, saved, err := loadHostCalibration(calFile, offline)
		useFile := false
		if est != nil && !o.Reprofile {
			// The file must hold every CPU model of the plan made from it,
			// and the calibration must have taken it (a calibration that
			// ignores series no batch measured lately would not).
			fromFile := hostConfig(offline, est, time.Now())
			_, p, perr := fuseAndPlan(fromFile, o, sv, true)
			useFile = perr == nil && covers(est, cpuEntries(p)) && !sameCPUProfiles(offline, fromFile)
		}
		switch {
		case err != nil:
			logf(o.Log, "warning: %v; profiling the CPU models again", err)
		case useFile:
			logf(o.Log, "planning the CPU models from %s (kept %s ago by the last demo's gateway; --reprofile measures them again)", calFile, time.Since(saved).Round(time.Second))
		case est != nil && !o.Reprofile:
			logf(o.Log, "%s does not hold every CPU model of the plan made from it (10 batches of each, applied by calibration); profiling them", calFile)
		}
		var calls map[hostEntry][]time.Duration
		if !useFile {
			// The gateway starts from the file when there is one: not
			// from what the profile below measures.
			if err := forget(calFile); err != nil {
				return nil, err
			}
			if est, err = newProfileEstimator(offline); err != nil {
				return nil, err
			}
			targets := map[string]hostTarget{}
			for _, e := range entries {
				if _, ok := targets[e.hardware]; ok {
					continue
				}
				b, err := startBackend(e.hardware)
				if err != nil {
					return nil, err
				}
				if err := waitListening(ctx, b.c, 90*time.Second, procs); err != nil {
					return nil, fmt.Errorf("demo: backend %s did not start (logs in %s): %w", b.id, logs, err)
				}
				targets[e.hardware] = hostTarget{addr: b.c.addr(0), id: b.id}
			}
			images, err := profileImages()
			if err != nil {
				return nil, err
			}
			if calls, err = profileHost(ctx, est, offline, entries, targets, images, o.Log); err != nil {
				return nil, err
			}
		}
		host := hostConfig(offline, est, time.Now())
		configured := plan
		if cfg, plan, err = fuseAndPlan(host, o, sv, false); err != nil {
			return nil, err
		}
		for _, e := range cpuEntries(plan) {
			if !slices.Contains(entries, e) {
				entries = append(entries, e)
			}
		}
		hostRows = hostModels(offline, host, entries, calls, est)
		writeHostModels(o.Out, hostRows)
		warnUnplanned(o.Log, configured, plan, hostRows)
		data, err := api.EncodeYAML(host)
		if err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		hostFile := filepath.Join(o.OutDir, "config", "host.yaml")
		if err := os.MkdirAll(filepath.Dir(hostFile), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(hostFile, data, 0o644); err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		gatewayFiles = []string{hostFile}
	}
	own := "" // the sessions the burst check planned below the plan's cap
	for _, sp := range plan.Sessions {
		if sp.MaxUtilization > 0 {
			own += fmt.Sprintf(", %s %.2f", sp.Name, sp.MaxUtilization)
		}
	}
	if own != "" {
		own = " (" + own[2:] + ")"
	}
	logf(o.Log, "planned %d session(s) with policy %s at utilisation %.2f%s: total cost %.3g", len(plan.Sessions), o.Policy, plan.MaxUtilization, own, plan.TotalCost)

	// One backend process per device of the placed plan (placement packs the
	// fractional machines of different modules onto shared devices), up to
	// the cap per hardware type.
	placed, _, err := placement.Place(plan, nil, nil, placement.Options{Provision: true})
	devices := placement.Devices(placed)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	need := placement.DevicesByHardware(placed)
	logf(o.Log, "placed on %d device(s) for a plan of cost %.3g: %s", devices, plan.TotalCost, needString(need))
	spares, spread := 0, 0
	var short []ShortType
	count := map[string]int{} // backends to run, by hardware type
	for _, hw := range sortedKeys(need) {
		n := min(need[hw], o.MaxBackendsPerType)
		switch {
		case coresPerMachine(hw) == 0 && !o.NoSpares:
			k := simSpares(n)
			n, spares = n+k, spares+k
		case cpuThreads.MatchString(hw) && !o.NoSpread:
			k := max(0, min(oneLaneDevices(plan, hw, hc.Cores), o.MaxBackendsPerType)-n)
			n, spread = n+k, spread+k
		}
		count[hw] = max(n, started[hw])
		if need[hw] > count[hw] {
			short = append(short, ShortType{Hardware: hw, Needed: need[hw], Started: count[hw]})
			logf(o.Log, "warning: the plan needs %d %s devices; the demo started %d of them (--max-backends %d, spares included): the gateway fits the plan to them and refuses the rest", need[hw], hw, count[hw], o.MaxBackendsPerType)
		}
	}
	// The host's cores as the gateway will place the plan on these backends
	// (placement.Place, Static: the fractions spread over one-lane devices).
	host := &HostCPU{Cores: hc.Cores, Free: hc.Free, Planned: planCores(placed), Reserve: demoReserveCores}
	if sp, _, err := placement.Place(plan, plannedMembers(count), nil, placement.Options{Static: true}); err == nil {
		host.Planned = planCores(sp)
	}
	if err := host.fitError(); err != nil {
		logf(o.Log, "warning: %v", err)
	}
	for _, hw := range sortedKeys(count) {
		n := count[hw]
		have := started[hw]
		for i := have; i < n; i++ {
			if _, err := startBackend(hw); err != nil {
				return nil, err
			}
		}
		logf(o.Log, "started %d %s backend(s)", max(n, have), hw)
	}
	if spares > 0 {
		logf(o.Log, "%d of the emulated backends are idle spares: the gateway re-plans onto them when the measured rate stays above the plan", spares)
	}
	if spread > 0 {
		logf(o.Log, "%d of the CPU backends are one-lane devices beyond the plan's packing: the gateway spreads the plan's fractional machines over them, so that one module's batches do not wait for another's on a single lane", spread)
	}
	if err := checkStaticPlacement(plan, members); err != nil {
		logf(o.Log, "warning: %v", err)
	}
	var backendsYAML strings.Builder
	backendsYAML.WriteString("backends:\n")
	for _, b := range backends {
		if err := waitListening(ctx, b.c, 90*time.Second, procs); err != nil {
			return nil, fmt.Errorf("demo: backend %s did not start (logs in %s): %w", b.id, logs, err)
		}
		fmt.Fprintf(&backendsYAML, "  - {id: %s, address: %q, hardware: %s}\n", b.id, b.c.addr(0), b.hw)
	}
	bfile := filepath.Join(o.OutDir, "config", "backends.yaml")
	if err := os.MkdirAll(filepath.Dir(bfile), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(bfile, []byte(backendsYAML.String()), 0o644); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	token, ownToken, err := adminToken()
	if err != nil {
		return nil, err
	}
	gw, err := procs.start(o.Binary, 2, func(addrs []string) []string {
		args := []string{"gateway", "--listen", addrs[0], "--grpc-listen", addrs[1], "--log", "console", "-c", bfile,
			"--admin-listen", "same", // the demo reads /metrics on its one loopback port
			"--max-utilization", strconv.FormatFloat(plan.MaxUtilization, 'g', -1, 64), "--policy", o.Policy}
		if roundRobin(o.Policy) {
			args = append(args, "--dispatch", "rr")
		}
		for _, sp := range plan.Sessions { // the burst check's own caps, session by session
			if sp.MaxUtilization > 0 {
				args = append(args, "--session-utilization", sp.Name+"="+strconv.FormatFloat(sp.MaxUtilization, 'g', -1, 64))
			}
		}
		if o.NoFusion {
			args = append(args, "--no-fusion")
		}
		if calFile != "" { // it keeps what it learns for the next demo
			args = append(args, "--calibration-file", calFile)
		}
		for _, f := range gatewayFiles {
			args = append(args, "-c", f)
		}
		return append(args, o.GatewayArgs...)
	}, filepath.Join(logs, "gateway.log"), "PICCOLO_ADMIN_TOKEN="+token)
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, gw, "/v2/health/ready", 90*time.Second, procs); err != nil {
		return nil, fmt.Errorf("demo: the gateway did not become ready (see %s): %w", filepath.Join(logs, "gateway.log"), err)
	}
	httpAddr, grpcAddr := gw.addr(0), gw.addr(1)
	url := "http://" + httpAddr
	logf(o.Log, "gateway ready: HTTP %s, gRPC %s; loading every session for %s", url, grpcAddr, o.Duration)

	res := &Result{PlanCost: plan.TotalCost, Devices: devices, Backends: len(backends), Spares: spares, Spread: spread, Short: short, Host: host,
		HostModels: hostRows, CalibrationFile: calFile}
	// The CPU each process uses over the load; the sim backends as one.
	names, pids := []string{"gateway", "load generator"}, []int{gw.cmd.Process.Pid, os.Getpid()}
	for _, b := range backends {
		name := b.id
		if coresPerMachine(b.hw) == 0 {
			name = "sim backends"
		}
		names, pids = append(names, name), append(pids, b.c.cmd.Process.Pid)
	}
	meter := newCPUMeter(names, pids)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var runErr error
	for _, sp := range plan.Sessions {
		s, _ := cfg.Session(sp.Name)
		r := SessionResult{Name: sp.Name, PlanCost: sp.Cost, BaselineCost: math.NaN(), NotPlannedError: sp.Error,
			AccuracyTarget: sp.AccuracyTarget, Accuracy: sp.Accuracy, AccuracyJoint: sp.AccuracyJoint}
		for _, mp := range sp.Modules {
			if mp.Variant != "" {
				r.Variants = append(r.Variants, mp.Name+" "+mp.Variant)
			}
		}
		// The round-robin baseline (Nexus, else InferLine) under the headroom
		// rule the plan was made with, from the plan's own cap down, its plan
		// simulated with its own dispatch (docs/evaluation.md, "Equal footing").
		r.Cap = plan.Utilization(&sp)
		from := evaluation.ServingFrom(r.Cap)
		if sv.flush != nil { // simulated with the flush its gateway serves
			from.Flush = sv.flush
		}
		from.Admission = from.Admission && sv.admission
		r.ChargedCost, r.LiveChargedCost, r.LiveDeviceCost = math.NaN(), math.NaN(), math.NaN()
		if sp.Error == "" {
			one := &api.Config{Hardware: cfg.Hardware, Profiles: cfg.Profiles, Sessions: []api.Session{*s}}
			if rows, err := evaluation.Footing(one, []string{o.Policy}, from); err == nil && len(rows) == 1 && rows[0].Planned {
				r.ChargedCost, r.SimAttainment = rows[0].Cost, rows[0].Attainment
			}
		}
		if b, err := evaluation.Baseline(cfg, s, from); err == nil {
			r.BaselineCost, r.BaselinePolicy, r.BaselineAttainment = b.Cost, b.Policy, b.Attainment
		}
		r.Rate = sessionRate(s)
		res.Sessions = append(res.Sessions, r)
	}
	// res.Sessions is complete before any load starts: the loads write their
	// reports into it (under mu), so it must not grow meanwhile.
	for i, r := range res.Sessions {
		if r.NotPlannedError != "" {
			continue
		}
		s, _ := cfg.Session(r.Name)
		var payloads []loadgen.Payload
		if isOCR(s) {
			_, samples := ocrSet(s)
			if payloads, err = ocrImages(samples); err != nil {
				return nil, err
			}
		}
		wg.Add(1)
		go func(i int, s *api.Session, rate float64) {
			defer wg.Done()
			// One seed per session: with one seed for all, the two OCR
			// sessions (same rate) drew the same arrival times, so every
			// Poisson bunch of one was a bunch of the other on the same CPU
			// backends at the same moment: 165 s into a 3-minute demo, 8
			// requests of each in 1.5 s, refused by admission (both runs
			// logged).
			lo := loadgen.Options{
				Target: url, Protocol: "http", Session: s.Name, Rate: rate, Arrival: "poisson", Seed: uint64(i + 1),
				Duration: o.Duration, Drain: 10 * time.Second, Timeout: 10 * time.Second, SLO: s.SLO.D(),
			}
			if isOCR(s) {
				// Images travel as raw BYTES, which gRPC carries as they are.
				lo.Target, lo.Protocol, lo.Payloads = grpcAddr, "grpc", payloads
			}
			rep, err := loadgen.Run(ctx, lo)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				runErr = errors.Join(runErr, fmt.Errorf("session %s: %w", s.Name, err))
				return
			}
			res.Sessions[i].Report = rep
		}(i, s, r.Rate)
	}
	wg.Wait()
	host.Used = map[string]float64{}
	for i, c := range meter.cores() {
		host.Used[names[i]] += c
	}
	// The plots after every load: drawing one takes a core for a moment,
	// which the sessions still loaded would miss.
	for i := range res.Sessions {
		r := &res.Sessions[i]
		s, _ := cfg.Session(r.Name)
		if r.Report == nil {
			continue
		}
		plot := filepath.Join(o.OutDir, "latency-"+r.Name+".png")
		if err := loadgen.WritePlot(plot, "session "+r.Name, r.Report.Latencies, s.SLO.D()); err == nil {
			r.Plot = plot
		}
	}
	if runErr != nil {
		return res, runErr
	}
	if refusals, door, err := gatewayRefusals(ctx, url, placed); err == nil {
		res.DoorShed = door
		for i := range res.Sessions {
			r := &res.Sessions[i]
			r.Refusals = refusals[r.Name]
			if r.Refusals != nil && r.Report != nil {
				charge := func(byHardware map[string]float64) float64 { // machine-seconds by type
					if byHardware == nil {
						return math.NaN()
					}
					cost := 0.0
					for hw, sec := range byHardware {
						if h, ok := cfg.HardwareByName(hw); ok {
							cost += sec * h.Price
						}
					}
					return max(r.PlanCost, cost/o.Duration.Seconds()/r.Cap)
				}
				r.LiveChargedCost, r.LiveDeviceCost = charge(r.Refusals.Occupied), charge(r.Refusals.Device)
			}
		}
	} else {
		logf(o.Log, "warning: reading the gateway's metrics: %v", err)
	}
	for i := range res.Sessions {
		if s, _ := cfg.Session(res.Sessions[i].Name); res.Sessions[i].Report != nil && isOCR(s) {
			acc, err := ocrAccuracy(ctx, grpcAddr, s)
			if err != nil { // the load's figures stand: report them, and this
				logf(o.Log, "warning: session %s: reading the test images: %v", s.Name, err)
				continue
			}
			res.Sessions[i].OCR = acc
		}
	}
	writeReport(o.Out, res)
	if o.Serve {
		fmt.Fprintf(o.Out, "\nServing until interrupted (Ctrl-C):\n  HTTP  %s   (metrics: %s/metrics)\n  gRPC  %s\n  live view  %s\n\nTry:\n", url, url, grpcAddr, viewURL(url, token, ownToken))
		for _, sp := range plan.Sessions {
			s, _ := cfg.Session(sp.Name)
			switch {
			case sp.Error != "":
			case isOCR(s):
				fmt.Fprintf(o.Out, "  piccolo loadgen --target %s --protocol grpc --session %s --rate 1 --duration 10s --input IMAGE.png\n", grpcAddr, sp.Name)
			default:
				fmt.Fprintf(o.Out, "  curl -s -X POST %s/v2/models/%s/infer -d '{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,1],\"datatype\":\"FP32\",\"data\":[1]}]}'\n", url, sp.Name)
			}
		}
		<-ctx.Done()
	}
	return res, nil
}

// fuseAndPlan fuses c as the gateway will (its plan is this one; not with
// o.NoFusion), logging the fusions to o.Log unless quiet, and plans it at
// o.MaxUtilization, or without one at the headroom that meets the SLO for
// DefaultBurstTarget of simulated Poisson requests, as the gateway plans,
// served as sv says (o.GatewayArgs, read once by Run: servedBy). It
// returns the fused config and the plan (sessions that could not plan are
// named in it), or the error when nothing planned.
func fuseAndPlan(c *api.Config, o Options, sv served, quiet bool) (*api.Config, *api.Plan, error) {
	planFor := func(c *api.Config) (*api.Plan, error) {
		so := serving.Options{Scheduler: planner.Options{Policy: o.Policy, MaxUtilization: o.MaxUtilization},
			Flush: sv.flush, Dispatch: sv.dispatch, NoAdmission: !sv.admission}
		if so.Dispatch == nil && roundRobin(o.Policy) { // served with --dispatch rr: its burst check simulates that
			so.Dispatch = dispatcher.RR{}
		}
		return serving.Plan(c, so)
	}
	if !o.NoFusion {
		fc, fusions, err := planner.Fuse(c, planFor)
		if err != nil {
			return nil, nil, err
		}
		for _, f := range fusions {
			if !quiet && o.Log != nil {
				logf(o.Log, "%s", f)
			}
		}
		c = fc
	}
	plan, err := planFor(c)
	if plan == nil {
		return nil, nil, err
	}
	return c, plan, nil
}

func needString(need map[string]int) string {
	var s []string
	for _, hw := range sortedKeys(need) {
		s = append(s, fmt.Sprintf("%d %s", need[hw], hw))
	}
	return strings.Join(s, ", ")
}

// checkStaticPlacement returns an error when the gateway's placement on a
// static backends list (placement.Place with Options.Static, what a LiveSwitch places with:
// packing when members hold the devices the plan needs, else round-robin)
// loads a backend of members beyond occupancy 1: the plan then runs slower
// than planned.
func checkStaticPlacement(plan *api.Plan, members []placement.Member) error {
	placed, _, err := placement.Place(plan, members, nil, placement.Options{Static: true})
	if err != nil {
		return err
	}
	occ := map[string]float64{}
	for m := range placed.Machines() {
		occ[m.Backend] += min(1, m.Group.Machines-float64(m.Index))
	}
	var over []string
	for _, id := range sortedKeys(occ) {
		if occ[id] > 1+1e-9 {
			over = append(over, fmt.Sprintf("%s at occupancy %.3g", id, occ[id]))
		}
	}
	if len(over) > 0 {
		return fmt.Errorf("the gateway's placement (placement.Place, static) on %d backends overloads %s", len(members), strings.Join(over, ", "))
	}
	return nil
}

// simSpares is how many idle backends the demo starts beside the n planned
// devices of an emulated (sim) hardware type: ceil(0.3 n). The gateway's
// control loop re-plans onto idle backends when the measured rate's envelope
// stays 20% above the plan, which Poisson bursts at the paper chain's 50
// req/s do within 30 s; with none idle it placed the larger plan round-robin,
// machines sharing backends, and refused or missed requests (87 refusals in
// one run). A sim backend costs the host next to nothing (it sleeps); a CPU
// backend costs cores, so CPU types get none (docs/ocr.md).
func simSpares(n int) int { return (3*n + 9) / 10 }

// sessionRate is a session's request rate: the largest rate of its source modules.
func sessionRate(s *api.Session) float64 {
	r := 0.0
	for _, i := range s.Sources() {
		r = math.Max(r, s.Modules[i].Rate)
	}
	return r
}

func writeReport(w io.Writer, res *Result) {
	fmt.Fprintf(w, "plan: cost %.3g (fractional machines) on %d devices once placed; %d backend processes (%d idle spares, %d one-lane CPU devices to spread over)\n", res.PlanCost, res.Devices, res.Backends, res.Spares, res.Spread)
	for _, st := range res.Short {
		fmt.Fprintf(w, "plan: needs %d %s devices, %d started (--max-backends): the gateway fits the plan to them and refuses the rest\n", st.Needed, st.Hardware, st.Started)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tRATE\tSENT\tOK\tTHROUGHPUT\tP50\tP99\tSLO\tSLO ATTAINMENT\tPLAN COST\tCHARGED SIM / LIVE (DEVICE)\tROUND-ROBIN BASELINE CHARGED")
	for _, s := range res.Sessions {
		base, charged, live := "cannot plan", "-", "-"
		if !math.IsNaN(s.ChargedCost) {
			charged = fmt.Sprintf("%.3g", s.ChargedCost)
		}
		if !math.IsNaN(s.LiveChargedCost) {
			live = fmt.Sprintf("%.3g", s.LiveChargedCost)
			if !math.IsNaN(s.LiveDeviceCost) {
				live += fmt.Sprintf(" (device %.3g)", s.LiveDeviceCost)
			}
		}
		charged += " / " + live
		if !math.IsNaN(s.BaselineCost) {
			base = fmt.Sprintf("%.3g (%s, %.2f%% simulated)", s.BaselineCost, s.BaselinePolicy, 100*s.BaselineAttainment)
			if !math.IsNaN(s.ChargedCost) {
				base = fmt.Sprintf("%.3g (%s, %+.1f%%, %.2f%% simulated)", s.BaselineCost, s.BaselinePolicy, 100*(s.BaselineCost-s.ChargedCost)/s.ChargedCost, 100*s.BaselineAttainment)
			}
		}
		if s.Report == nil {
			fmt.Fprintf(tw, "%s\t%.4g\t-\t-\t-\t-\t-\t-\tnot planned: %s\t-\t-\t%s\n", s.Name, s.Rate, s.NotPlannedError, base)
			continue
		}
		r := s.Report
		att, slo := "n/a", "-"
		if r.SLOAttainment != nil {
			att = fmt.Sprintf("%.2f%%", 100**r.SLOAttainment)
			if !math.IsNaN(s.ChargedCost) {
				att += fmt.Sprintf(" (sim %.2f%%)", 100*s.SimAttainment)
			}
		}
		if r.SLOMs != nil {
			slo = fmt.Sprintf("%gms", *r.SLOMs)
		}
		fmt.Fprintf(tw, "%s\t%.4g/s\t%d\t%d\t%.4g/s\t%.1fms\t%.1fms\t%s\t%s\t%.3g\t%s\t%s\n",
			s.Name, s.Rate, r.Sent, r.OK, r.Throughput, r.P50Ms, r.P99Ms, slo, att, s.PlanCost, charged, base)
	}
	tw.Flush()
	if res.Host != nil {
		res.Host.write(w)
	}
	if res.DoorShed > 0 {
		fmt.Fprintf(w, "gateway door: %.0f request(s) refused before they were read, the gateway's own CPU saturated (counted in the sessions' \"rejected: overloaded\" below)\n", res.DoorShed)
	}
	for _, s := range res.Sessions {
		if len(s.Variants) > 0 {
			how := ""
			if s.AccuracyJoint {
				how = " (measured jointly)"
			}
			fmt.Fprintf(w, "%s variants: %s; accuracy target %.3g, planned %.3g%s\n", s.Name, strings.Join(s.Variants, ", "), s.AccuracyTarget, s.Accuracy, how)
		}
		if s.OCR != nil {
			target := ""
			if len(s.Variants) > 0 {
				target = fmt.Sprintf(" (target %.3g)", s.AccuracyTarget)
			}
			refused := ""
			if s.OCR.Refused > 0 {
				refused = fmt.Sprintf(" (%d more refused by admission %d times each)", s.OCR.Refused, accuracyTries)
			}
			fmt.Fprintf(w, "%s accuracy on the %d %s images: %d/%d words exact (%.1f%%)%s, %d/%d images exact%s\n",
				s.Name, s.OCR.Images, s.OCR.Set, s.OCR.WordsRead, s.OCR.Words, 100*float64(s.OCR.WordsRead)/float64(max(s.OCR.Words, 1)), target, s.OCR.ImagesExact, s.OCR.Images, refused)
		}
		if s.Report != nil && len(s.Report.Errors) > 0 {
			fmt.Fprintf(w, "%s errors: %v\n", s.Name, s.Report.Errors)
			if r := s.Refusals; r != nil {
				refused := ""
				if r.Door > 0 {
					refused = fmt.Sprintf("%.0f refused at the gateway's door (its CPU saturated); ", r.Door)
				}
				if r.Admission > 0 {
					refused += fmt.Sprintf("%.0f refused by admission (the queue could not finish them in time); ", r.Admission)
				}
				fmt.Fprintf(w, "%s measured: %smodules' batch durations over the plan's, and their items' mean wait in the gateway: %s\n", s.Name, refused, strings.Join(r.Slow, ", "))
			}
		}
		if s.Plot != "" {
			fmt.Fprintf(w, "%s latency CDF: %s\n", s.Name, s.Plot)
		}
	}
}

// writeEmbedded copies the embedded default configs to dir, for the children.
func writeEmbedded(dir string) ([]string, error) {
	var out []string
	for _, name := range configs.Demo {
		data, err := fs.ReadFile(configs.FS, name)
		if err != nil {
			return nil, fmt.Errorf("demo: embedded config %s: %w", name, err)
		}
		p := filepath.Join(dir, filepath.Base(name))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("demo: no free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitListening waits until something accepts connections at every address
// of c (a backend binds gRPC before /metrics: the first alone says nothing of
// the second), then marks c confirmed: from then on it keeps its addresses.
func waitListening(ctx context.Context, c *child, limit time.Duration, procs *processes) error {
	err := poll(ctx, limit, procs, func() error {
		for _, a := range c.addrs {
			conn, err := net.DialTimeout("tcp", a, time.Second)
			if err != nil {
				return err
			}
			conn.Close()
		}
		return nil
	})
	if err == nil {
		procs.confirm(c)
	}
	return err
}

// waitReady waits until path on c's first address answers 200 over HTTP (the
// gateway answers once both its listeners are bound), then marks c confirmed.
func waitReady(ctx context.Context, c *child, path string, limit time.Duration, procs *processes) (err error) {
	defer func() {
		if err == nil {
			procs.confirm(c)
		}
	}()
	return poll(ctx, limit, procs, func() error {
		url := "http://" + c.addr(0) + path
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answers %d", url, resp.StatusCode)
		}
		return nil
	})
}

// poll calls check every 100 ms until it succeeds, a child exits (one that
// lost a port race is started again first), ctx ends or limit passes (then it
// returns check's last error).
func poll(ctx context.Context, limit time.Duration, procs *processes, check func() error) error {
	deadline := time.Now().Add(limit)
	for {
		if err := procs.exited(); err != nil {
			return err
		}
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// portRetries is how many times a child that found a picked port taken is
// started again on fresh ones.
const portRetries = 3

// processes are the demo's children; stop ends them all. Children listen on
// loopback ports the demo picks with freeAddr, so that it knows where they
// are before they log anything. Such a port can be taken by another process
// between the pick and the child's bind (and on a busy machine is, now and
// then); exited starts a child that exited saying so again on fresh ports.
// Methods are called from the demo's goroutine; the fields a restart changes
// are guarded by mu.
type processes struct {
	mu    sync.Mutex
	procs []*child
}

// child is one process of the demo; argsFor gives its arguments for the
// addresses it is to listen on.
type child struct {
	name    string
	bin     string
	ports   int
	argsFor func(addrs []string) []string
	logPath string
	env     []string // added to the demo's environment (the gateway's admin token)
	tries   int
	// confirmed: seen listening on all its addresses, which the demo may have
	// written down (backends.yaml); never restarted elsewhere after that.
	confirmed bool

	// One run's state; replaced by a restart, under processes.mu.
	addrs []string
	cmd   *exec.Cmd
	done  chan struct{}
	err   error
	log   *os.File
}

// addr returns the child's i-th listen address, host:port.
func (c *child) addr(i int) string {
	return c.addrs[i]
}

// start runs bin with argsFor's arguments for ports fresh loopback addresses,
// its output going to logPath.
func (p *processes) start(bin string, ports int, argsFor func(addrs []string) []string, logPath string, env ...string) (*child, error) {
	c := &child{bin: bin, ports: ports, argsFor: argsFor, logPath: logPath, env: env}
	if err := c.run(); err != nil {
		return nil, err
	}
	c.name = c.cmd.Args[1] + " " + filepath.Base(logPath)
	p.mu.Lock()
	p.procs = append(p.procs, c)
	p.mu.Unlock()
	return c, nil
}

// run picks c's addresses and starts one run of it.
func (c *child) run() error {
	addrs := make([]string, c.ports)
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return err
		}
		addrs[i] = a
	}
	f, err := os.Create(c.logPath)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	args := c.argsFor(addrs)
	cmd := exec.Command(c.bin, args...)
	if c.env != nil {
		cmd.Env = append(os.Environ(), c.env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("demo: starting %s %s: %w", c.bin, strings.Join(args, " "), err)
	}
	done := make(chan struct{})
	c.addrs, c.cmd, c.done, c.err, c.log = addrs, cmd, done, nil, f
	go func() {
		err := cmd.Wait()
		c.err = err // read only after done is closed
		close(done)
	}()
	return nil
}

// confirm marks c as listening where its addresses say.
func (p *processes) confirm(c *child) {
	p.mu.Lock()
	c.confirmed = true
	p.mu.Unlock()
}

// lostPortRace reports whether c's last run exited because an address it
// was given was already in use.
func (c *child) lostPortRace() bool {
	b, err := os.ReadFile(c.logPath)
	return err == nil && strings.Contains(string(b), "address already in use")
}

// exited reports the first child that has already exited, as an error; a
// child that lost a port race is started again (at most portRetries times)
// instead.
func (p *processes) exited() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.procs {
		select {
		case <-c.done:
		default:
			continue
		}
		if !c.confirmed && c.tries < portRetries && c.lostPortRace() {
			c.tries++
			c.log.Close()
			if err := c.run(); err != nil {
				return err
			}
			continue
		}
		return fmt.Errorf("%s exited early (%v); see %s", c.name, c.err, c.log.Name())
	}
	return nil
}

// stop sends SIGTERM to every child (gateway first, it was started last), waits up
// to 15 s, then kills what is left.
func (p *processes) stop(log io.Writer) {
	p.mu.Lock()
	procs := p.procs
	p.procs = nil
	p.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		_ = procs[i].cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(15 * time.Second)
	for _, c := range procs {
		select {
		case <-c.done:
		case <-deadline:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		c.log.Close()
	}
	if len(procs) > 0 {
		logf(log, "stopped %d process(es)", len(procs))
	}
}

func logf(w io.Writer, format string, a ...any) {
	fmt.Fprintf(w, "demo: "+format+"\n", a...)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
