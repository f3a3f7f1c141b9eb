package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/planner"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

var paperConfigs = []string{"-c", "../../configs/paper/profiles.yaml", "-c", "../../configs/paper/sessions.yaml"}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// runtimes differ run to run; golden files hold everything else.
var runtime = regexp.MustCompile(`planned in [0-9.e+-]+ms`)

func TestPlanTableGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		// Each policy at its own utilisation (planner.Options'
		// default for it): the planner alone, without the burst check
		// `piccolo plan` makes by default as the gateway does.
		{"paper-no-dummy", []string{"--policy", "paper", "--no-dummy", "--max-utilization", "1"}},
		{"paper", []string{"--policy", "paper", "--max-utilization", "1"}},
		{"piccolo", []string{"--max-utilization", "0.8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, append(append([]string{"plan"}, paperConfigs...), tc.args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			out = runtime.ReplaceAllString(out, "planned in Xms")
			golden := filepath.Join("testdata", "plan-"+tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if out != string(want) {
				t.Errorf("output differs from %s (run with -update if intended):\n%s", golden, out)
			}
		})
	}
}

// The JSON a user gets from every policy re-checks against the config.
func TestPlanJSONRechecks(t *testing.T) {
	cfg, err := api.Load("../../configs/paper/profiles.yaml", "../../configs/paper/sessions.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range planner.Policies {
		util := "1" // each policy at its own utilisation, as TestPlanTableGolden
		if policy == "piccolo" {
			util = "0.8"
		}
		out, err := run(t, append(append([]string{"plan"}, paperConfigs...), "--policy", policy, "--max-utilization", util, "-o", "json")...)
		if err != nil {
			t.Fatalf("%s: %v", policy, err)
		}
		var p api.Plan
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("%s: output is not plan JSON: %v\n%s", policy, err, out)
		}
		if p.Policy != policy || len(p.Sessions) != 2 {
			t.Errorf("%s: plan says policy %q with %d sessions", policy, p.Policy, len(p.Sessions))
		}
		if err := planner.Verify(cfg, &p); err != nil {
			t.Errorf("%s: %v", policy, err)
		}
	}
}

func TestPlanBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan"}, "no config given"},
		{append([]string{"plan", "--policy", "fastest"}, paperConfigs...), `unknown policy "fastest"`},
		{append([]string{"plan", "-o", "xml"}, paperConfigs...), `-o "xml"`},
		{append([]string{"plan", "--max-utilization", "1.5"}, paperConfigs...), "must be in (0, 1]"},
		{[]string{"plan", "-c", "does-not-exist.yaml"}, "does-not-exist.yaml"},
		{append([]string{"plan", "--session-utilization", "s=0.7"}, paperConfigs...), "--session-utilization needs --max-utilization"},
		{append([]string{"plan", "--max-utilization", "0.8", "--session-utilization", "nope=0.7"}, paperConfigs...), `the config has no session "nope"`},
		{append([]string{"plan", "--max-utilization", "0.8", "--session-utilization", "nope=2"}, paperConfigs...), "the cap must be a number in (0, 1]"},
		{append([]string{"plan", "--dispatch", "fifo"}, paperConfigs...), `unknown dispatch policy "fifo"`},
	} {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("piccolo %s: error %v, want one saying %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// The profile measured on a real H100 (configs/gpu/h100.yaml, docs/gpu.md)
// shows the paper's premise: a loose SLO is served with large batches on a
// fraction of one GPU, a tight one with small batches and more machines.
func TestGPUProfilePlansBatchesBySLO(t *testing.T) {
	machines := map[string]float64{}
	for _, tc := range []struct {
		slo                string
		minBatch, maxBatch int
	}{
		{"478ms", 16, 64}, // the session gpu-check served: b32 c2 on 0.63 of the GPU
		{"30ms", 1, 8},    // a batch's wait and run must fit 30 ms: b8 c1 on 1.18 GPUs
	} {
		t.Run(tc.slo, func(t *testing.T) {
			session := filepath.Join(t.TempDir(), "session.yaml")
			text := "sessions:\n  - name: gpu\n    slo: " + tc.slo + "\n    modules:\n      - {name: net, model: mobilenet_v3_large, rate: 550}\n"
			if err := os.WriteFile(session, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := run(t, "plan", "-c", "../../configs/gpu/h100.yaml", "-c", session, "-o", "json")
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			plan, err := api.ReadPlan(strings.NewReader(out), "plan -o json")
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if len(plan.Sessions) != 1 || plan.Sessions[0].Error != "" || len(plan.Sessions[0].Modules) != 1 {
				t.Fatalf("plan: %s", out)
			}
			m := plan.Sessions[0].Modules[0]
			for _, g := range m.Configs {
				machines[tc.slo] += g.Machines
				if g.Hardware != "h100" || g.Batch < tc.minBatch || g.Batch > tc.maxBatch {
					t.Errorf("group %s b%d c%d on %.2f machines; want h100 and a batch in %d..%d", g.Hardware, g.Batch, g.Concurrency, g.Machines, tc.minBatch, tc.maxBatch)
				}
			}
			if m.WCLMs > plan.Sessions[0].SLOMs {
				t.Errorf("WCL %.1f ms over the SLO %.0f ms", m.WCLMs, plan.Sessions[0].SLOMs)
			}
		})
	}
	if !(machines["478ms"] < 1 && machines["30ms"] > machines["478ms"]) {
		t.Errorf("machines: %v; want under one GPU at 478 ms and more at 30 ms", machines)
	}
}
