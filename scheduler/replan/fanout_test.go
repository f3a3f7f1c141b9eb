package replan

import (
	"slices"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// fanOutConfig is testdata/fanout-learn.yaml: a detector det at 40
// images/s whose recognizer rec (model r, batches of at most 4) runs one
// item per object found, declared at 3 objects an image without a
// distribution, under an 80 ms SLO.
func fanOutConfig(t *testing.T) *api.Config {
	t.Helper()
	cfg, err := api.Load("testdata/fanout-learn.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// feedFanOut runs secs seconds of det at 40 images/s whose images bring
// objects(i) objects (i counting images), reporting and stepping each second.
func (h *harness) feedFanOut(det, rec *Counter, secs int, objects func(i int) int) {
	i := 0
	for range secs {
		for end := h.now.Add(time.Second); h.now.Before(end); {
			for range 4 { // 4 images a 100 ms bucket
				det.Add(1)
				rec.AddItems(objects(i))
				i++
			}
			h.now = h.now.Add(h.mon.bucket)
			h.mon.Advance(h.now)
		}
		h.c.ObserveRates("gw", h.mon.Snapshot(h.now))
		h.c.step(h.now)
	}
}

func recPlan(t *testing.T, p *api.Plan) api.ModulePlan {
	t.Helper()
	for _, m := range p.Sessions[0].Modules {
		if m.Name == "rec" {
			return m
		}
	}
	t.Fatal("no rec in the plan")
	return api.ModulePlan{}
}

func machines(m api.ModulePlan) float64 {
	var n float64
	for _, g := range m.Configs {
		n += g.Machines
	}
	return n
}

// TestFanOutDistributionLearnedLive: a recognizer declared at 3 objects an
// image (its mean) without a distribution, whose detector finds 0 objects
// in three images of four and 12 in the fourth (Llama's input-dependent
// flow). Once 1,000 images are counted the controller re-plans it (cause
// fanout) with the measured distribution, and the planner gives the
// twelve objects of one image the machines to run side by side; while the
// measurement stays, nothing more; when every image then brings 3 objects
// (one batch of 4), the distribution in use is forgotten within two
// generations and the module re-planned down; a config that changes rec's
// declared fanout drops the measured one.
func TestFanOutDistributionLearnedLive(t *testing.T) {
	cfg := fanOutConfig(t)
	h := newHarness(t, cfg, pool("v100", 10), Options{})
	det := h.mon.Handle("s", "det", EnvelopeWindow(80*time.Millisecond, 40))
	rec := h.mon.HandleFanOut("s", "rec", EnvelopeWindow(80*time.Millisecond, 40), 40)
	before := recPlan(t, h.last().Plan)
	zeroOr12 := func(i int) int {
		if i%4 == 3 {
			return 12
		}
		return 0
	}
	h.feedFanOut(det, rec, 20, zeroOr12) // 800 images: too few
	if len(h.published) != 1 {
		t.Fatalf("800 images: re-plans %v; want none before %d", causes(h.published[1:]), MinFanOutSamples)
	}
	h.feedFanOut(det, rec, 10, zeroOr12)
	if len(h.published) != 2 || h.last().Cause != CauseFanOut {
		t.Fatalf("1,200 images of 0 or 12 objects: re-plans %v; want one with cause fanout", causes(h.published[1:]))
	}
	learned := recPlan(t, h.last().Plan)
	t.Logf("rec: machines %.3f → %.3f, cost %.3f → %.3f, fanout %v, batch %d", machines(before), machines(learned), before.Cost, learned.Cost, learned.FanOut, learned.Configs[0].Batch)
	want := api.FanOut{{Items: 0, Share: 0.75}, {Items: 12, Share: 0.25}}
	if !slices.Equal(learned.FanOut, want) {
		t.Errorf("planned fanout %v; want %v", learned.FanOut, want)
	}
	if machines(learned) < machines(before)+1 {
		t.Errorf("rec machines %.3f → %.3f; want whole machines added for the 12 objects", machines(before), machines(learned))
	}
	h.feedFanOut(det, rec, 60, zeroOr12)
	if len(h.published) != 2 {
		t.Fatalf("the same distribution for another minute: re-plans %v; want none more", causes(h.published[1:]))
	}
	three := func(int) int { return 3 }
	h.feedFanOut(det, rec, 20, three)
	if len(h.published) != 2 {
		t.Fatalf("20 s of 3 objects, the twelves still counted: re-plans %v; want none more", causes(h.published[1:]))
	}
	h.feedFanOut(det, rec, 60, three)
	if len(h.published) != 3 || h.last().Cause != CauseFanOut {
		t.Fatalf("then every image 3 objects: re-plans %v; want a third with cause fanout", causes(h.published[1:]))
	}
	down := recPlan(t, h.last().Plan)
	t.Logf("down: rec machines %.3f, fanout %v", machines(down), down.FanOut)
	if !slices.Equal(down.FanOut, api.FanOut{{Items: 3, Share: 1}}) || machines(down) >= machines(learned) {
		t.Errorf("re-planned down to fanout %v, %.3f machines; want {3: 1} and fewer than %.3f", down.FanOut, machines(down), machines(learned))
	}
	changed := *cfg
	changed.Sessions = slices.Clone(cfg.Sessions)
	changed.Sessions[0].Modules = slices.Clone(cfg.Sessions[0].Modules)
	changed.Sessions[0].Modules[1].FanOut = api.FanOut{{Items: 2, Share: 0.5}, {Items: 4, Share: 0.5}}
	h.c.SetConfig(&changed)
	h.c.step(h.now)
	if got := recPlan(t, h.last().Plan).FanOut; !slices.Equal(got, changed.Sessions[0].Modules[1].FanOut) {
		t.Errorf("after a config declaring rec's fanout: planned %v; want the declared %v", got, changed.Sessions[0].Modules[1].FanOut)
	}
}
