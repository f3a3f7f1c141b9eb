package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/placement"
)

// The demo's host is one capacity of cores (docs/ocr.md, "CPU backends share
// the host's cores"): every cpu-* backend it starts runs here, beside the
// gateway, the sim backends and the load generator, and each was profiled
// with the cores it uses to itself. So the demo declares the host's cores,
// counts the cores the placed plan's CPU devices keep busy (occupancy ×
// threads per machine) plus its own reserve, and says before the load when
// they do not fit what is free, and after it what each process used.

// demoReserveCores is what the gateway, the sim backends and the load
// generators of the demo take at its planned rates: 0.5 core, measured with
// hostReport (about 0.35 for the gateway, 0.1 for the load, the sims next to
// nothing) on the 2-core development machine.
const demoReserveCores = 0.25

// coresPerMachine is the cores one machine of a CPU hardware type keeps busy
// at occupancy 1: N for cpu-<N>t (its ONNX Runtime intra-op threads), 1 for any
// other cpu-* type (the Go processing modules, one batch at a time), 0 for a
// type the demo emulates (the sim executor sleeps).
func coresPerMachine(hw string) float64 {
	if m := cpuThreads.FindStringSubmatch(hw); m != nil {
		n, _ := strconv.Atoi(m[1])
		return float64(n)
	}
	if strings.HasPrefix(hw, "cpu-") {
		return 1
	}
	return 0
}

// oneLaneDevices is how many backends the demo starts of hw, a one-lane
// CPU type (cpu-<N>t, started with --device-lanes 1: one batch at a time
// across its models), beside the devices placement packs the plan onto: a
// device for each machine of hw in the plan (a fraction is planned as a
// machine of its own), as many as the host's cores run at once (cores / N).
// The gateway's placement on a static list spreads the fractions over
// them (placement.Place, Static): stacked on one lane, each module's
// batches waited for the others', a wait the plan did not count, and
// admission refused what the queue could not finish in time (docs/ocr.md,
// "One lane, four models"). The cores the plan keeps busy do not change
// (occupancy × cores per machine, planCores): the work is the same, spread.
func oneLaneDevices(plan *api.Plan, hw string, cores int) int {
	per := coresPerMachine(hw)
	if per <= 0 {
		return 0
	}
	machines := 0
	for _, sp := range plan.Sessions {
		if sp.Error != "" {
			continue
		}
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				if g.Hardware == hw {
					machines += int(math.Ceil(g.Machines - 1e-9))
				}
			}
		}
	}
	return min(machines, int(float64(cores)/per))
}

// plannedMembers are the backends count says to run, as the demo names
// them ("<hardware>-<i>").
func plannedMembers(count map[string]int) []placement.Member {
	var out []placement.Member
	for _, hw := range sortedKeys(count) {
		for i := range count[hw] {
			out = append(out, placement.Member{ID: fmt.Sprintf("%s-%d", hw, i), Hardware: hw})
		}
	}
	return out
}

// planCores returns, per backend of the placed plan running on the host's
// CPU, the cores its machines keep busy on average: Σ machines (occupancy) ×
// coresPerMachine over the groups placed on it.
func planCores(placed *api.Plan) map[string]float64 {
	out := map[string]float64{}
	for _, sp := range placed.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				c := coresPerMachine(g.Hardware)
				if c == 0 || len(g.Backends) == 0 {
					continue
				}
				for i, id := range g.Backends {
					out[id] += c * min(1, g.Machines-float64(i))
				}
			}
		}
	}
	return out
}

// hostCPU is the host's cores and how busy they are; from /proc/stat (Linux).
type hostCPU struct {
	Cores int
	// Free is the cores idle over the sample before the demo started its
	// processes (another process's busy loop shows here); NaN where unknown.
	Free float64
}

// measureHost samples /proc/stat over d.
func measureHost(d time.Duration) hostCPU {
	h := hostCPU{Cores: runtime.NumCPU(), Free: math.NaN()}
	busy0, total0, err := procStat()
	if err != nil {
		return h
	}
	time.Sleep(d)
	busy1, total1, err := procStat()
	if err != nil || total1 <= total0 {
		return h
	}
	h.Free = float64(h.Cores) * (1 - float64(busy1-busy0)/float64(total1-total0))
	return h
}

// procStat returns the busy and total jiffies of all CPUs.
func procStat() (busy, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %q: %w", s, err)
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every
// Linux the demo runs on.
const clockTicks = 100

// cpuSeconds returns the CPU time pid has used (user + system), s.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count fields after its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: times %q %q", pid, f[11], f[12])
	}
	return (utime + stime) / clockTicks, nil
}

// cpuMeter measures the cores each of the demo's processes uses over the load.
type cpuMeter struct {
	start time.Time
	names []string
	pids  []int
	at    []float64 // CPU seconds at start; NaN when unreadable
}

func newCPUMeter(names []string, pids []int) *cpuMeter {
	m := &cpuMeter{start: time.Now(), names: names, pids: pids, at: make([]float64, len(pids))}
	for i, pid := range pids {
		s, err := cpuSeconds(pid)
		if err != nil {
			s = math.NaN()
		}
		m.at[i] = s
	}
	return m
}

// cores returns each process's cores used since newCPUMeter (NaN: unknown).
func (m *cpuMeter) cores() []float64 {
	el := time.Since(m.start).Seconds()
	out := make([]float64, len(m.pids))
	for i, pid := range m.pids {
		s, err := cpuSeconds(pid)
		if err != nil || el <= 0 {
			out[i] = math.NaN()
			continue
		}
		out[i] = (s - m.at[i]) / el
	}
	return out
}

// HostCPU is the demo's accounting of the host's cores (Result.Host).
type HostCPU struct {
	Cores int     // runtime.NumCPU
	Free  float64 // idle cores measured before the demo started (NaN: unknown)
	// Planned is the cores the placed plan's CPU backends keep busy at its
	// occupancies, by backend; Reserve the demo's own (gateway, sims, load).
	Planned map[string]float64
	Reserve float64
	// Used is the cores each process used over the load, by name ("gateway",
	// a backend id, "load generator"); nil when not measured.
	Used map[string]float64
}

// PlannedTotal is Σ Planned + Reserve.
func (h *HostCPU) PlannedTotal() float64 {
	t := h.Reserve
	for _, c := range h.Planned {
		t += c
	}
	return t
}

// fitError says, when the plan's CPU backends and the demo's reserve need
// more cores than the host has free, by how much; nil when they fit.
func (h *HostCPU) fitError() error {
	free := h.Free
	if math.IsNaN(free) {
		free = float64(h.Cores)
	}
	if need := h.PlannedTotal(); need > free+1e-9 {
		return fmt.Errorf("the plan's CPU backends keep %.2f cores busy and the demo's gateway, sims and load %.2f more (%.2f in all), but the host has %.2f of its %d cores free: its CPU backends may run slower than profiled (the plan's occupancy is an upper bound: p90 durations at the planned utilisation), and admission refuse what they cannot serve in time",
			need-h.Reserve, h.Reserve, need, free, h.Cores)
	}
	return nil
}

func (h *HostCPU) write(w io.Writer) {
	free := "unknown"
	if !math.IsNaN(h.Free) {
		free = fmt.Sprintf("%.2f", h.Free)
	}
	fmt.Fprintf(w, "host CPU: %d cores, %s free before the demo; planned: CPU backends %s + demo reserve %.2f = %.2f cores\n",
		h.Cores, free, coresList(h.Planned), h.Reserve, h.PlannedTotal())
	if h.Used != nil {
		total := 0.0
		for _, c := range h.Used {
			if !math.IsNaN(c) {
				total += c
			}
		}
		fmt.Fprintf(w, "host CPU used during the load: %s = %.2f cores\n", coresList(h.Used), total)
	}
}

func coresList(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := sortedKeys(m)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.2f", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// Refusals is what the gateway measured about one session's refused and
// failed requests: its metrics after the load.
type Refusals struct {
	// Admission is the requests admission control refused at once (429).
	Admission float64
	// Door is the requests the gateway's door refused before reading them
	// (429), counted for the session its HTTP path named
	// (piccolo_gateway_door_shed_total{session}).
	Door float64
	// Slow lists each module's measured mean batch duration (gateway side,
	// network included) over its plan's, highest first, with the mean time
	// its items queued in the gateway, e.g. "det 1.8× (queued 40 ms)".
	Slow []string
	// Occupied is the machine-seconds the session's batches occupied, by
	// hardware type, over every plan the gateway served
	// (piccolo_gateway_occupied_machine_seconds_total).
	Occupied map[string]float64
	// Device is the part of Occupied the devices ran: the compute time the
	// backends reported with their answers, by hardware type
	// (piccolo_gateway_device_machine_seconds_total).
	Device map[string]float64
}

// gatewayRefusals reads the gateway's /metrics and returns, per session,
// the admission and door refusals and the modules' measured/profiled
// durations, and the requests the gateway's door refused before reading
// them, all sessions together (also those it could not name a session
// for); an error when the metrics cannot be read.
func gatewayRefusals(ctx context.Context, base string, plan *api.Plan) (map[string]*Refusals, float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, 0, fmt.Errorf("parse %s/metrics: %w", base, err)
	}
	out := map[string]*Refusals{}
	get := func(s string) *Refusals {
		if out[s] == nil {
			out[s] = &Refusals{}
		}
		return out[s]
	}
	if f := fams[metrics.GatewayAdmissionRejectionsTotal]; f != nil {
		for _, m := range f.GetMetric() {
			get(label(m, "session")).Admission += m.GetCounter().GetValue()
		}
	}
	planned := map[[2]string]float64{} // session, module → the plan's batch duration, s (the longest group's)
	for _, sp := range plan.Sessions {
		for _, mp := range sp.Modules {
			for _, g := range mp.Configs {
				k := [2]string{sp.Name, mp.Name}
				planned[k] = max(planned[k], g.DurationMs/1000)
			}
		}
	}
	type ratio struct {
		module string
		r      float64
		queued float64 // s
	}
	queued := map[[2]string]float64{}
	if f := fams[metrics.GatewayModuleQueueSeconds]; f != nil {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h.GetSampleCount() > 0 {
				queued[[2]string{label(m, "session"), label(m, "module")}] = h.GetSampleSum() / float64(h.GetSampleCount())
			}
		}
	}
	slow := map[string][]ratio{}
	if f := fams[metrics.GatewayModuleComputeSeconds]; f != nil {
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			k := [2]string{label(m, "session"), label(m, "module")}
			if h.GetSampleCount() == 0 || planned[k] <= 0 {
				continue
			}
			// Items, not batches: an item's compute is its batch's.
			slow[k[0]] = append(slow[k[0]], ratio{k[1], h.GetSampleSum() / float64(h.GetSampleCount()) / planned[k], queued[k]})
		}
	}
	for s, rs := range slow {
		sort.Slice(rs, func(i, j int) bool { return rs[i].r > rs[j].r })
		for _, r := range rs {
			get(s).Slow = append(get(s).Slow, fmt.Sprintf("%s %.2g× (queued %.0f ms)", r.module, r.r, 1000*r.queued))
		}
	}
	// Machine-seconds by session and hardware type: occupied, and the part
	// the devices ran.
	for name, field := range map[string]func(*Refusals) *map[string]float64{
		metrics.GatewayOccupiedMachineSecondsTotal: func(r *Refusals) *map[string]float64 { return &r.Occupied },
		metrics.GatewayDeviceMachineSecondsTotal:   func(r *Refusals) *map[string]float64 { return &r.Device },
	} {
		for _, m := range fams[name].GetMetric() {
			sec := field(get(label(m, "session")))
			if *sec == nil {
				*sec = map[string]float64{}
			}
			(*sec)[label(m, "hardware")] += m.GetCounter().GetValue()
		}
	}
	var door float64
	if f := fams[metrics.GatewayDoorShedTotal]; f != nil {
		for _, m := range f.GetMetric() {
			v := m.GetCounter().GetValue()
			door += v
			if s := label(m, "session"); s != "" && v > 0 {
				get(s).Door += v
			}
		}
	}
	return out, door, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
