package placement

import (
	"testing"

	"github.com/piccolo-serving/piccolo/api"
)

// TestChainsKeepAChainsFractionsTogether: the demo's two OCR sessions (det,
// then a chain after it) on two devices. Spreading alone puts each
// session's chain on the other session's det device, so each intermediate
// crosses devices; with Options.Chains each chain sits beside its own det,
// on the same devices at the same occupancy. A fraction that does not fit
// beside its neighbour goes where it would have gone.
func TestChainsKeepAChainsFractionsTogether(t *testing.T) {
	session := func(name, det string, detM, chainM float64) api.SessionPlan {
		return api.SessionPlan{Name: name, Modules: []api.ModulePlan{
			{Name: "det", Model: det, Configs: []api.GroupPlan{{Hardware: "cpu", Machines: detM}}},
			{Name: "chain", Model: "chain", After: []string{"det"}, Configs: []api.GroupPlan{{Hardware: "cpu", Machines: chainM}}},
		}}
	}
	members := []Member{{ID: "a", Hardware: "cpu"}, {ID: "b", Hardware: "cpu"}}
	on := func(p *api.Plan, s, m int) string { return p.Sessions[s].Modules[m].Configs[0].Backends[0] }
	for _, tc := range []struct {
		name      string
		plan      *api.Plan
		chains    bool
		ocr, ocrV string // det's device and chain's device, per session
	}{
		{"spread only", &api.Plan{Sessions: []api.SessionPlan{session("ocr", "det", 0.39, 0.12), session("ocr-variants", "det-480", 0.31, 0.12)}}, false, "ab", "ba"},
		{"chains", &api.Plan{Sessions: []api.SessionPlan{session("ocr", "det", 0.39, 0.12), session("ocr-variants", "det-480", 0.31, 0.12)}}, true, "aa", "bb"},
		{"a neighbour too full", &api.Plan{Sessions: []api.SessionPlan{session("ocr", "det", 0.9, 0.2)}}, true, "ab", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			placed, short, err := Place(tc.plan, members, nil, Options{Static: true, Chains: tc.chains})
			if err != nil || short.Err() != nil {
				t.Fatalf("err %v, shortfall %v", err, short.Err())
			}
			if got := on(placed, 0, 0) + on(placed, 0, 1); got != tc.ocr {
				t.Errorf("ocr: det, chain on %s; want %s", got, tc.ocr)
			}
			if tc.ocrV != "" {
				if got := on(placed, 1, 0) + on(placed, 1, 1); got != tc.ocrV {
					t.Errorf("ocr-variants: det, chain on %s; want %s", got, tc.ocrV)
				}
			}
		})
	}
}
