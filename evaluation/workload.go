package evaluation

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/planner"
)

// Workload is one workload of §IV-A: one application with drawn rates and SLO.
type Workload struct {
	ID      int
	App     string
	Modules int
	Config  *api.Config // the application's profiles and its one session
}

// WorkloadSpec bounds the random draws of Generate. The paper says only that its
// workloads vary rates and SLOs; these bounds are ours (docs/evaluation.md).
type WorkloadSpec struct {
	MinRate, MaxRate float64 // source module rate, req/s, drawn log-uniformly
	// MinFanout, MaxFanout scale each downstream module's nominal rate ratio to
	// its first parent (objects per frame vary), drawn uniformly.
	MinFanout, MaxFanout float64
	// MinSlack, MaxSlack: the SLO is the fastest path (every module at batch 1
	// on its fastest hardware, 2d, so that every policy can plan it) times a
	// factor drawn log-uniformly in [MinSlack, MaxSlack].
	MinSlack, MaxSlack float64
}

// DefaultWorkloadSpec: source rates 20–1000 req/s, fan-out 0.5–2× nominal, SLO
// 1.5–6× the fastest 2d path.
var DefaultWorkloadSpec = WorkloadSpec{MinRate: 20, MaxRate: 1000, MinFanout: 0.5, MaxFanout: 2, MinSlack: 1.5, MaxSlack: 6}

// Generate returns n workloads drawn from apps (Apps) with the given seed, the
// applications in turn (AppNames order); the same seed gives the same
// workloads.
func Generate(apps *api.Config, seed uint64, n int, spec WorkloadSpec) []Workload {
	r := rand.New(rand.NewPCG(seed, 0x2545f4914f6cdd1d))
	logUniform := func(lo, hi float64) float64 { return math.Exp(math.Log(lo) + r.Float64()*(math.Log(hi)-math.Log(lo))) }
	out := make([]Workload, 0, n)
	for i := range n {
		app, _ := apps.Session(AppNames[i%len(AppNames)])
		s := api.Session{Name: app.Name, Modules: append([]api.Module(nil), app.Modules...)}
		src := logUniform(spec.MinRate, spec.MaxRate)
		rates := map[string]float64{}
		for j, m := range s.Modules {
			rate := src
			if len(m.After) > 0 {
				parent := m.After[0]
				nominal, _ := moduleRate(app, parent)
				rate = rates[parent] * m.Rate / nominal * (spec.MinFanout + r.Float64()*(spec.MaxFanout-spec.MinFanout))
			}
			rates[m.Name] = rate
			s.Modules[j].Rate = math.Round(rate*10) / 10
		}
		fast := fastestPath(apps, &s)
		s.SLO = api.Duration(time.Duration(fast * logUniform(spec.MinSlack, spec.MaxSlack) * float64(time.Second)).Round(time.Millisecond))
		out = append(out, Workload{ID: i, App: app.Name, Modules: len(s.Modules),
			Config: &api.Config{Hardware: apps.Hardware, Profiles: apps.Profiles, Sessions: []api.Session{s}}})
	}
	return out
}

// Random wraps the planner benchmark's random workloads
// (planner.GenerateWorkloads, synthetic profiles) as Workloads, so Run can
// referee them too (`piccolo bench paper --random`).
func Random(seed uint64, n int) []Workload {
	cfgs := planner.GenerateWorkloads(seed, n, planner.DefaultWorkloadSpec)
	out := make([]Workload, len(cfgs))
	for i, c := range cfgs {
		out[i] = Workload{ID: i, App: c.Sessions[0].Name, Modules: len(c.Sessions[0].Modules), Config: c}
	}
	return out
}

func moduleRate(s *api.Session, name string) (float64, bool) {
	for _, m := range s.Modules {
		if m.Name == name {
			return m.Rate, true
		}
	}
	return 0, false
}

// fastestPath returns the longest path, in seconds, of each module's fastest
// batch-1 duration times 2 (round-robin's WCL, the most conservative model).
// Modules are listed parents first (the config loader checks it).
func fastestPath(cfg *api.Config, s *api.Session) float64 {
	end := map[string]float64{}
	longest := 0.0
	for _, m := range s.Modules {
		d := math.Inf(1)
		for _, p := range cfg.ProfilesOf(m.Model) {
			for _, e := range p.Entries {
				if e.Batch == 1 {
					d = min(d, e.Duration.Seconds())
				}
			}
		}
		start := 0.0
		for _, a := range m.After {
			start = max(start, end[a])
		}
		end[m.Name] = start + 2*d
		longest = max(longest, end[m.Name])
	}
	return longest
}
