package dataplane

import (
	"context"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/planner"
)

// A health re-placement kicked while an Apply is being made must re-place
// what that Apply made live, not the plan it replaced: re-placing the old
// one would swap the operator's change back (an admin PUT answered 200 whose
// plan then vanished). The re-placement is held just before it takes the
// Apply lock while the Apply runs to completion.
func TestReplacementDuringAnApplyKeepsTheApply(t *testing.T) {
	rig := startFaultRig(t, 3, LiveOptions{})
	sw := rig.sw
	entered, release := make(chan struct{}), make(chan struct{})
	sw.beforeReplace = func() { entered <- struct{}{}; <-release }
	sw.Health().changed() // a health change: the goroutine re-places
	<-entered

	text := strings.Replace(faultConfig, "slo: 300ms", "slo: 250ms", 1)
	if text == faultConfig {
		t.Fatal("the test's config change did not apply")
	}
	var bl strings.Builder
	bl.WriteString("backends:\n")
	for _, b := range sw.Config().Backends {
		bl.WriteString("  - {id: " + b.ID + ", address: \"" + b.Address + "\", hardware: " + b.Hardware + "}\n")
	}
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "c.yaml", Data: []byte(text)}, api.NamedDoc{Name: "b.yaml", Data: []byte(bl.String())})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planner.Plan(cfg, planner.Options{Policy: "piccolo"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Apply(context.Background(), cfg, plan); err != nil {
		t.Fatal(err)
	}
	close(release)
	// A second change is taken once the first re-placement is over.
	sw.Health().changed()
	<-entered
	if got := sw.Config(); got != cfg {
		t.Errorf("after the re-placement the switch serves SLO %v, want the applied config's 250ms", got.Sessions[0].SLO.D())
	}
	if got := sw.Plan().Sessions[0].SLOMs; got != 250 {
		t.Errorf("after the re-placement the plan's SLO is %v ms, want 250", got)
	}
}
