package replan

import (
	"math"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// TestBranchShareLearnedLive: a source whose items take one of two
// conditional branches, declared half and half (Llama's input-dependent
// flow: a branch taken with its measured probability). Given each module's
// own arrivals (what the gateway counts, controlplane/arrivals.go; through
// the gateway: controlplane's TestBranchShareLearnedThroughTheGateway),
// when nine items in ten take branch a the controller
// re-plans with a at 90% of the source's rate and b at 10%, and b's
// machines go to a.
func TestBranchShareLearnedLive(t *testing.T) {
	const R = 400
	cfg := controlConfig(R, 300*time.Millisecond)
	s := &cfg.Sessions[0]
	s.Modules = []api.Module{
		{Name: "src", Model: "m", Rate: R},
		{Name: "a", Model: "m", Rate: R / 2, After: []string{"src"}},
		{Name: "b", Model: "m", Rate: R / 2, After: []string{"src"}},
	}
	h := newHarness(t, cfg, pool("v100", 10), Options{})
	src := h.mon.Handle("s", "src", EnvelopeWindow(300*time.Millisecond, R))
	a := h.mon.Handle("s", "a", EnvelopeWindow(300*time.Millisecond, R/2))
	b := h.mon.Handle("s", "b", EnvelopeWindow(300*time.Millisecond, R/2))
	before := moduleCosts(h.last().Plan)
	for range 60 {
		for end := h.now.Add(time.Second); h.now.Before(end); {
			per := h.mon.bucket.Seconds()
			src.Add(int64(math.Round(R * per)))
			a.Add(int64(math.Round(0.9 * R * per)))
			b.Add(int64(math.Round(0.1 * R * per)))
			h.now = h.now.Add(h.mon.bucket)
			h.mon.Advance(h.now)
		}
		h.c.ObserveRates("gw", h.mon.Snapshot(h.now))
		h.c.step(h.now)
	}
	if len(h.published) < 2 || h.last().Cause != CauseRate {
		t.Fatalf("a 90/10 split of a 50/50 plan: re-plans %v; want one with cause rate", causes(h.published[1:]))
	}
	rates := h.last().Rates
	ra, rb := rates[ModuleKey{"s", "a"}], rates[ModuleKey{"s", "b"}]
	after := moduleCosts(h.last().Plan)
	t.Logf("planned rates a %.0f, b %.0f req/s; cost a %.3f → %.3f, b %.3f → %.3f", ra, rb, before["a"], after["a"], before["b"], after["b"])
	if ra < 0.8*R || rb > 0.2*R {
		t.Errorf("planned a at %.0f and b at %.0f req/s; want about %.0f and %.0f", ra, rb, 0.9*R, 0.1*R)
	}
	if after["b"] >= before["b"] || after["a"] <= before["a"] {
		t.Errorf("cost a %.3f → %.3f, b %.3f → %.3f: want b's machines moved to a", before["a"], after["a"], before["b"], after["b"])
	}
}

func moduleCosts(p *api.Plan) map[string]float64 {
	out := map[string]float64{}
	for _, m := range p.Sessions[0].Modules {
		out[m.Name] = m.Cost
	}
	return out
}
