package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/piccolo-serving/piccolo/simulate"
)

// fig3Plan is the paper's Fig. 3 written by hand as plan JSON.
const fig3Plan = `{"policy":"hand","sessions":[{"name":"fig3","slo_ms":4000,"latency_ms":2750,"cost":3,
 "modules":[{"name":"m","model":"m","rate":8,"dummy_rate":0,"budget_ms":4000,"wcl_ms":2750,"cost":3,
  "configs":[{"hardware":"gpu","price":1,"batch":6,"concurrency":1,"duration_ms":2000,"machines":2,"rate":6,"wcl_ms":2750,"cost":2},
             {"hardware":"gpu","price":1,"batch":2,"concurrency":1,"duration_ms":1000,"machines":1,"rate":2,"wcl_ms":2000,"cost":1}]}]}]}`

// runSimulate runs `piccolo simulate args...` (plan_test.go's run).
func runSimulate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, append([]string{"simulate"}, args...)...)
}

func TestSimulateHandWrittenPlan(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fig3.json")
	if err := os.WriteFile(path, []byte(fig3Plan), 0o644); err != nil {
		t.Fatal(err)
	}
	max := map[string]float64{}
	for _, d := range []string{"tc", "rr"} {
		out, err := runSimulate(t, "--plan", path, "--dispatch", d, "--arrival", "constant", "--rate", "8",
			"--duration", "60s", "--seed", "3", "-o", "json")
		if err != nil {
			t.Fatalf("%s: %v\n%s", d, err, out)
		}
		var r simulate.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: output is not a report: %v\n%s", d, err, out)
		}
		s := r.Sessions[0]
		if r.Dispatch != d || s.Requests != 480 || s.Completed != 480 {
			t.Fatalf("%s: report %+v", d, r)
		}
		max[d] = s.Latency.MaxMs
	}
	t.Logf("Fig. 3 through the CLI: TC max %.1f ms, RR max %.1f ms", max["tc"], max["rr"])
	if max["tc"] > 2750 || max["rr"] < 3200 {
		t.Errorf("TC max %.1f ms (want ≤ 2750), RR max %.1f ms (want ≥ 3200)", max["tc"], max["rr"])
	}
	out, err := runSimulate(t, "--plan", path, "--duration", "10s", "--arrival", "gamma", "--cv2", "2")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"session fig3", "p99.9", "m/g0m1", "utilisation"} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
}

func TestSimulateErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{\"sessions\":[{\"name\":\"s\",\n\"modules\":[{\"name\":\"m\",\"configs\":[{\"batch_size\":4}]}]}]}"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--duration", "1s"}, "pass --plan PLAN.json, or -c FILE"},
		{[]string{"--plan", bad, "--duration", "1s"}, `unknown field "batch_size"`},
		{[]string{"--plan", bad, "--duration", "1s", "--dispatch", "fifo"}, "allowed: tc, rr"},
		{[]string{"--plan", bad, "--duration", "1s", "--arrival", "gamma", "--cv2", "0"}, "--cv2 0: must be > 0"},
		{[]string{"--plan", bad}, "--duration not set"},
		{[]string{"--plan", bad, "--duration", "1s", "-o", "xml"}, "allowed: table, json"},
	} {
		_, err := runSimulate(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("simulate %v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// Every command's --cv2 defaults to 1 (Poisson), so `--arrival gamma` means
// the same process in plan, simulate and loadgen.
func TestCV2DefaultIsPoisson(t *testing.T) {
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		if f := c.Flags().Lookup("cv2"); f != nil {
			seen++
			if f.DefValue != "1" {
				t.Errorf("%s --cv2 defaults to %s; want 1 (Poisson), as the other commands", c.CommandPath(), f.DefValue)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	if seen < 3 {
		t.Errorf("found --cv2 on %d commands; want plan, simulate and loadgen at least", seen)
	}
	// gamma without --cv2 runs (as Poisson) and says so.
	out, err := runSimulate(t, "-c", "../../configs/demo/paper-gpus.yaml", "--duration", "5s", "--arrival", "gamma")
	if err != nil || !strings.Contains(out, "arrivals gamma (cv² 1)") {
		t.Errorf("simulate --arrival gamma without --cv2: %v\n%s", err, out)
	}
}
