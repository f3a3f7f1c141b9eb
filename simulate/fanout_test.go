package simulate

import (
	"bytes"
	"math"
	"os"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/dispatcher"
	"github.com/piccolo-serving/piccolo/planner"
)

// fanOutConfig is testdata/fanout.yaml (a detector at 40 images/s, its
// recognizer one item per object, SLO 60 ms) with rec's fanout replaced by
// fanout: "" plans it at a fixed 3 items per image, otherwise with the
// distribution given (mean 3).
func fanOutConfig(t testing.TB, fanout string) *api.Config {
	t.Helper()
	b, err := os.ReadFile("testdata/fanout.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const written = ", fanout: {0: 3, 12: 1}"
	if !bytes.Contains(b, []byte(written)) {
		t.Fatalf("testdata/fanout.yaml no longer has rec's %q", written)
	}
	b = bytes.Replace(b, []byte(written), []byte(fanout), 1)
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "fanout.yaml", Data: b})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// gatewayLoad simulates a plan as the gateway serves it: Poisson, the idle
// flush, admission.
func gatewayLoad(t *testing.T, p *api.Plan) SessionReport {
	t.Helper()
	r, err := Run(p, Options{Policy: dispatcher.TC{}, Flush: dispatcher.FlushIdle, Admission: true, Arrival: "poisson", Duration: 60 * time.Second, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return r.Sessions[0]
}

// A detector that finds no object in three images of four and twelve in the
// fourth (mean 3): the plan made for 3 objects an image, served to that
// distribution, misses the SLO for one request in twenty (the twelve items
// queue behind each other on the recognizer's one fractional machine); the
// plan made with the distribution adds the recognizer machines to run them
// side by side and meets it, at a higher cost. The simulator draws the
// items per image from the distribution (rec's items ≈ 3 × images).
// docs/planner.md, "Fan-out as a distribution", quotes the figures logged.
func TestFanOutPlannedAsADistribution(t *testing.T) {
	const dist = ", fanout: {0: 3, 12: 1}"
	fixed, err := planner.Plan(fanOutConfig(t, ""), planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	withDist, err := planner.Plan(fanOutConfig(t, dist), planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f := withDist.Sessions[0].Modules[1].FanOut; len(f) != 2 || f[1].Items != 12 || math.Abs(f[1].Share-0.25) > 1e-12 {
		t.Fatalf("the plan's rec fanout = %v, want the config's {0: 0.75, 12: 0.25}", f)
	}
	atMean := gatewayLoad(t, fixed)
	// The fixed plan served to the distribution: the same machines, items
	// drawn per image.
	served := *fixed
	served.Sessions = append([]api.SessionPlan(nil), fixed.Sessions...)
	served.Sessions[0].Modules = append([]api.ModulePlan(nil), fixed.Sessions[0].Modules...)
	served.Sessions[0].Modules[1].FanOut = withDist.Sessions[0].Modules[1].FanOut
	overPromised := gatewayLoad(t, &served)
	planned := gatewayLoad(t, withDist)
	for _, c := range []struct {
		name string
		p    *api.Plan
		s    SessionReport
	}{{"planned at 3 an image, served 3", fixed, atMean}, {"planned at 3 an image, served 0 or 12", &served, overPromised}, {"planned for 0 or 12, served 0 or 12", withDist, planned}} {
		t.Logf("%s: cost %.3f (rec %.3f machines), %d requests, %.2f%% within the SLO, %d refused, p99 %.1f ms, rec %d items",
			c.name, c.p.TotalCost, c.p.Sessions[0].Modules[1].Configs[0].Machines, c.s.Requests, 100*c.s.SLOAttainment, c.s.Refused, c.s.Latency.P99Ms, c.s.Modules[1].Items)
	}
	if atMean.SLOAttainment < 0.999 {
		t.Errorf("the fixed plan at its own fixed fan-out: %.4f within the SLO, want ≥ 0.999", atMean.SLOAttainment)
	}
	if overPromised.SLOAttainment > 0.99 {
		t.Errorf("the fixed plan under 0 or 12 objects: %.4f within the SLO; the case no longer shows planning at the mean over-promising", overPromised.SLOAttainment)
	}
	if planned.SLOAttainment < 0.999 {
		t.Errorf("the plan made with the distribution: %.4f within the SLO, want ≥ 0.999", planned.SLOAttainment)
	}
	if withDist.TotalCost <= fixed.TotalCost {
		t.Errorf("the distribution's plan costs %.3f, the fixed plan %.3f: want more machines for the bursts", withDist.TotalCost, fixed.TotalCost)
	}
	if got, want := float64(planned.Modules[1].Items), 3*float64(planned.Requests); math.Abs(got-want) > 0.06*want {
		t.Errorf("rec ran %v items for %d images, want about 3 an image (%v)", got, planned.Requests, want)
	}
}

// The distribution is drawn per image, deterministically for a seed: two
// runs agree, and a distribution of one point runs as the fixed ratio does.
func TestFanOutDrawsAreSeeded(t *testing.T) {
	p, err := planner.Plan(fanOutConfig(t, ", fanout: {0: 1, 6: 1}"), planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := gatewayLoad(t, p), gatewayLoad(t, p)
	if a.Modules[1].Items != b.Modules[1].Items || a.Latency.P99Ms != b.Latency.P99Ms {
		t.Errorf("two runs of one seed differ: %d vs %d items, p99 %v vs %v", a.Modules[1].Items, b.Modules[1].Items, a.Latency.P99Ms, b.Latency.P99Ms)
	}
	one, err := planner.Plan(fanOutConfig(t, ", fanout: {3: 1}"), planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := planner.Plan(fanOutConfig(t, ""), planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	x, y := gatewayLoad(t, one), gatewayLoad(t, fixed)
	if x.Modules[1].Items != y.Modules[1].Items || one.TotalCost != fixed.TotalCost {
		t.Errorf("fanout {3: 1}: %d items, cost %v; fixed ratio 3: %d items, cost %v", x.Modules[1].Items, one.TotalCost, y.Modules[1].Items, fixed.TotalCost)
	}
}
