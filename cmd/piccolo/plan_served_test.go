package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"github.com/piccolo-serving/piccolo/controlplane"
	"github.com/piccolo-serving/piccolo/internal/testharness"
)

// TestPlanIsServed: `piccolo plan -c FILES -o json` prints exactly the plan
// a `piccolo gateway -c FILES` (its flags' defaults) serves first, for
// every config under configs/ that has sessions, each with sim backends
// listed beside it (three of every hardware type: the pool both plan for).
// The gateway's plan is the one its control loop publishes (OnPlan),
// placed; compared without its backends and the planner's runtime.
// configs/gpu/h100.yaml holds profiles only (no sessions: nothing to serve).
func TestPlanIsServed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gateway per config")
	}
	sets := [][]string{
		{"ocr.yaml"},
		{"ocr.yaml", "ocr-variants.yaml"},
		{"demo/paper-gpus.yaml"},
		{"ocr.yaml", "demo/paper-gpus.yaml", "ocr-variants.yaml"}, // the demo's (configs.Demo)
		{"paper/profiles.yaml", "paper/sessions.yaml"},
	}
	for _, app := range []string{"actdet", "caption", "face", "pose", "traffic"} {
		sets = append(sets, []string{"paper/apps/profiles.yaml", "paper/apps/" + app + ".yaml"})
	}
	gw := gatewayDefaults(t)
	for _, set := range sets {
		t.Run(strings.Join(set, "+"), func(t *testing.T) {
			var files []string
			for _, f := range set {
				files = append(files, filepath.Join("../../configs", f))
			}
			cfg, err := api.Load(files...)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, simBackendsFile(t, cfg, 3))

			args := []string{"plan", "-o", "json"}
			for _, f := range files {
				args = append(args, "-c", f)
			}
			cmd := newRootCmd()
			var out, stderr bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&stderr)
			cmd.SetArgs(args)
			_ = cmd.Execute() // exits 1 when a session cannot be planned; the plan is printed still
			var printed api.Plan
			if err := json.Unmarshal(out.Bytes(), &printed); err != nil {
				t.Fatalf("piccolo plan printed no plan JSON: %v\n%s", err, stderr.String())
			}

			plans := make(chan *api.Plan, 4)
			o := gw
			o.files, o.listen, o.grpcListen, o.watch, o.logFmt = files, "127.0.0.1:0", "127.0.0.1:0", false, "json"
			o.onPlan = func(e controlplane.PlanEvent) { plans <- e.Plan }
			ctx, cancel := context.WithCancel(context.Background())
			_, done := startGateway(t, ctx, &o)
			defer func() { cancel(); <-done }()
			var served *api.Plan
			select {
			case served = <-plans:
			case <-time.After(30 * time.Second):
				t.Fatal("the gateway published no plan")
			}
			a, b := unplacedJSON(t, &printed), unplacedJSON(t, served)
			if a != b {
				t.Errorf("piccolo plan printed a plan other than the gateway's:\nplan:    %s\ngateway: %s", a, b)
			}
		})
	}
}

// gatewayDefaults are `piccolo gateway`'s options as its flags default
// them (the planning ones: --policy, --max-utilization, --burst-target,
// --no-fusion; the rest as the harness starts gateways).
func gatewayDefaults(t *testing.T) gatewayOptions {
	t.Helper()
	f := newGatewayCmd().Flags()
	def := func(name string) string {
		fl := f.Lookup(name)
		if fl == nil {
			t.Fatalf("piccolo gateway has no --%s", name)
		}
		return fl.DefValue
	}
	num := func(name string) float64 {
		v, err := strconv.ParseFloat(def(name), 64)
		if err != nil {
			t.Fatalf("--%s default %q: %v", name, def(name), err)
		}
		return v
	}
	return gatewayOptions{policy: def("policy"), maxUtil: num("max-utilization"), burst: num("burst-target"), noFuse: def("no-fusion") == "true",
		dispatch: def("dispatch"), flush: def("flush"), maxBody: int(num("max-body")), slack: num("slack"), admission: true, spare: true,
		hedge: num("hedge-budget"), probeEvery: time.Second, calibrate: def("calibration") == "true", drain: time.Second}
}

// simBackendsFile serves n sim backends of every hardware type of cfg on
// loopback until the test ends and writes their `backends:` list to a
// file, whose path it returns.
func simBackendsFile(t *testing.T, cfg *api.Config, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("backends:\n")
	for _, h := range cfg.Hardware {
		for i := range n {
			ex, err := sim.New(h.Name, cfg.Profiles, sim.Options{})
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := testharness.ServeBackend(t, ex)
			fmt.Fprintf(&b, "  - {id: %s-%d, address: %q, hardware: %s}\n", h.Name, i, addr, h.Name)
		}
	}
	path := filepath.Join(t.TempDir(), "backends.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// unplacedJSON is p's JSON without the backends placement named and the
// planner's runtime.
func unplacedJSON(t *testing.T, p *api.Plan) string {
	t.Helper()
	c := *p
	c.RuntimeMs = 0
	c.Sessions = slices.Clone(p.Sessions)
	for i := range c.Sessions {
		c.Sessions[i].Modules = slices.Clone(c.Sessions[i].Modules)
		for j := range c.Sessions[i].Modules {
			gs := slices.Clone(c.Sessions[i].Modules[j].Configs)
			for k := range gs {
				gs[k].Backends = nil
			}
			c.Sessions[i].Modules[j].Configs = gs
		}
	}
	out, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
