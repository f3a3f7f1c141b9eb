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
	"github.com/piccolo-serving/piccolo/scheduler"
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
		{"paper-no-dummy", []string{"--policy", "paper", "--no-dummy"}},
		{"paper", []string{"--policy", "paper"}},
		{"piccolo", nil},
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
	for _, policy := range scheduler.Policies {
		out, err := run(t, append(append([]string{"plan"}, paperConfigs...), "--policy", policy, "-o", "json")...)
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
		if err := scheduler.Check(cfg, &p); err != nil {
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
	} {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("piccolo %s: error %v, want one saying %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
