package demo

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/serving"
	"github.com/piccolo-serving/piccolo/simulate"
)

// halves is two sessions whose modules each need a fraction of a machine of
// one hardware type: placement packs both onto one device.
const halves = `
hardware:
  - {name: g, price: 1}
profiles:
  - model: ma
    hardware: g
    entries:
      - {batch: 1, concurrency: 1, duration: 20ms}
      - {batch: 4, concurrency: 1, duration: 40ms}
  - model: mb
    hardware: g
    entries:
      - {batch: 1, concurrency: 1, duration: 20ms}
      - {batch: 4, concurrency: 1, duration: 40ms}
sessions:
  - name: a
    slo: 400ms
    modules:
      - {name: m, model: ma, rate: 20}
  - name: b
    slo: 400ms
    modules:
      - {name: m, model: mb, rate: 20}
`

// TestDemoFractionalPlanOnPlacedDevices: a plan of two fractional groups,
// simulated on the devices placement packs it onto and run live by the demo on
// as many sim backends (one, which both modules share): the same SLO
// attainment within noise.
func TestDemoFractionalPlanOnPlacedDevices(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts processes")
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "halves.yaml")
	if err := os.WriteFile(cfgFile, []byte(halves), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := api.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := serving.Plan(cfg, serving.Options{})
	if err != nil {
		t.Fatal(err)
	}
	placed, _, err := placement.Place(plan, nil, nil, placement.Options{Provision: true})
	devices := placement.Devices(placed)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range plan.Sessions {
		if g := sp.Modules[0].Configs[0]; len(sp.Modules[0].Configs) != 1 || g.Machines >= 1 {
			t.Fatalf("session %s planned on %d groups, %.2f machines: the test wants one fractional group", sp.Name, len(sp.Modules[0].Configs), g.Machines)
		}
	}
	if devices != 1 {
		t.Fatalf("two fractional groups placed on %d devices, want 1", devices)
	}
	sim, err := simulate.Run(placed, simulate.Options{Arrival: "poisson", Duration: 60 * time.Second, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "piccolo")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/piccolo").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out, log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Files: []string{cfgFile}, Duration: 15 * time.Second, OutDir: filepath.Join(dir, "out"), Binary: bin, Out: &out, Log: &log, NoSpares: true})
	t.Logf("log:\n%s\nreport:\n%s", log.String(), out.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.Backends != 1 || res.Devices != 1 {
		t.Fatalf("%d backends for %d devices, want 1 and 1", res.Backends, res.Devices)
	}
	for i, s := range res.Sessions {
		if s.Report == nil || s.Report.SLOAttainment == nil {
			t.Fatalf("session %s: no live report", s.Name)
		}
		live, simulated := *s.Report.SLOAttainment, sim.Sessions[i].SLOAttainment
		t.Logf("session %s: SLO attainment live %.4f (%d requests), simulated %.4f; p99 live %.1fms, simulated %.1fms",
			s.Name, live, s.Report.Sent, simulated, s.Report.P99Ms, sim.Sessions[i].Latency.P99Ms)
		if live < simulated-0.02 {
			t.Errorf("session %s: live SLO attainment %.4f, simulated %.4f: more than 2 points apart", s.Name, live, simulated)
		}
	}
	if d := sim.Devices; len(d) != 1 || d[0].Queued == 0 {
		t.Errorf("simulated devices %+v: want one, with batches queued behind the other module's", d)
	}
}
