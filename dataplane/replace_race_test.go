package dataplane

import (
	"context"
	"strings"
	"testing"
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
	cfg, plan := plannedConfig(t, text, rig.backends)
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
