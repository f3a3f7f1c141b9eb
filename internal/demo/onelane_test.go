package demo

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/simulate"
)

// TestOneLaneDevicesServeTheOCRSessions plans the embedded demo as the demo
// does (every CPU model 1.3× its profile, as TestDemoEmbeddedDefault's
// calibration file has them), places it as the gateway places it on the
// backends the demo starts (placement.Place, Static), and simulates 10
// minutes of Poisson load at the planned rates with admission, as the
// gateway serves it: no OCR request may be refused or late. On the one
// cpu-1t device placement packs the plan onto, the four CPU models of the
// two OCR sessions shared one lane, and admission refused about 1% of
// their requests, every admitted one in time (docs/ocr.md, "One lane, four
// models"); that figure is logged beside.
func TestOneLaneDevicesServeTheOCRSessions(t *testing.T) {
	dir := t.TempDir()
	files, err := writeEmbedded(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := api.Load(files...)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Profiles {
		if coresPerMachine(cfg.Profiles[i].Hardware) > 0 {
			for j := range cfg.Profiles[i].Entries {
				e := &cfg.Profiles[i].Entries[j]
				e.Duration = api.Duration(time.Duration(1.3 * float64(e.Duration)))
			}
		}
	}
	_, plan, err := fuseAndPlan(cfg, Options{Log: io.Discard}, gatewayServed, true)
	if err != nil {
		t.Fatal(err)
	}
	packed, _, err := placement.Place(plan, nil, nil, placement.Options{Provision: true})
	if err != nil {
		t.Fatal(err)
	}
	need := placement.DevicesByHardware(packed)
	if need["cpu-1t"] != 1 {
		t.Fatalf("placement packs the plan's cpu-1t machines onto %d devices; the case is one", need["cpu-1t"])
	}
	const cores = 2 // the demo's host
	count := map[string]int{}
	for hw, n := range need {
		count[hw] = n
		if cpuThreads.MatchString(hw) {
			count[hw] = max(n, oneLaneDevices(plan, hw, cores))
		}
	}
	if count["cpu-1t"] < 2 {
		t.Errorf("the demo starts %d cpu-1t backends on a %d-core host for %d cpu-1t machines; want 2", count["cpu-1t"], cores, machinesOn(plan, "cpu-1t"))
	}
	simulateOn := func(count map[string]int) (*simulate.Report, *api.Plan) {
		t.Helper()
		placed, short, err := placement.Place(plan, plannedMembers(count), nil, placement.Options{Static: true})
		if err != nil || short.Err() != nil {
			t.Fatalf("static placement on %v: %v %v", count, err, short.Err())
		}
		rep, err := simulate.Run(placed, simulate.Options{Arrival: "poisson", Duration: 600 * time.Second, Seed: 1, Admission: true})
		if err != nil {
			t.Fatal(err)
		}
		return rep, placed
	}
	one := map[string]int{}
	for hw, n := range count {
		one[hw] = n
	}
	one["cpu-1t"] = 1
	repOne, _ := simulateOn(one)
	rep, placed := simulateOn(count)
	on := map[string][]string{} // cpu-1t backend → its modules
	for m := range placed.Machines() {
		if m.Group.Hardware == "cpu-1t" {
			on[m.Backend] = append(on[m.Backend], m.Session.Name+"/"+m.Module.Name)
		}
	}
	if len(on) < 2 {
		t.Errorf("the gateway's placement stacks every cpu-1t machine on one backend of %d: %v", count["cpu-1t"], on)
	}
	t.Logf("cpu-1t backends: %v", on)
	for i, s := range rep.Sessions {
		if !strings.HasPrefix(s.Name, "ocr") {
			continue
		}
		t.Logf("session %s: %d requests; on one cpu-1t device %d refused (attainment %.2f%%), on %d: %d refused, attainment %.2f%%",
			s.Name, s.Requests, repOne.Sessions[i].Refused, 100*repOne.Sessions[i].SLOAttainment, count["cpu-1t"], s.Refused, 100*s.SLOAttainment)
		if s.Refused > 0 || s.SLOAttainment < 1 {
			t.Errorf("session %s: %d of %d requests refused, %.2f%% within the SLO; want none refused, 100%%", s.Name, s.Refused, s.Requests, 100*s.SLOAttainment)
		}
	}
}

func machinesOn(plan *api.Plan, hw string) int {
	n := 0
	for m := range plan.Machines() {
		if m.Group.Hardware == hw {
			n++
		}
	}
	return n
}
