package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanAgainst: `piccolo plan --against URL -c FILE` dry-runs the file's
// session on a running gateway and prints the diff; the gateway's config
// version and plan stay as they were.
func TestPlanAgainst(t *testing.T) {
	t.Setenv("PICCOLO_ADMIN_TOKEN", "tok")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sg := startSimGateway(t, ctx, detGatewayConfig, nil)
	_, planBefore := adminDo(t, sg.url, "GET", "/admin/plan", "tok", "")
	file := filepath.Join(t.TempDir(), "sessions.yaml")
	if err := os.WriteFile(file, []byte("sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: d, model: det, rate: 40}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "plan", "--against", sg.url, "-c", file)
	if err != nil {
		t.Fatalf("plan --against: %v\n%s", err, out)
	}
	t.Logf("piccolo plan --against:\n%s", out)
	for _, want := range []string{"session s (dry run on config version 1): would apply", "cost", "machines v100", "s/d", "v100 b", "simulated SLO attainment"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if st, b := adminDo(t, sg.url, "GET", "/admin/plan", "tok", ""); st != 200 || b != planBefore {
		t.Errorf("the gateway's plan changed after a dry run:\nbefore %s\nafter %s", planBefore, b)
	}
	// A session the gateway refuses as invalid: its error, exit 1.
	if err := os.WriteFile(file, []byte("sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: d, model: nope, rate: 40}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "plan", "--against", sg.url, "-c", file); err == nil || !strings.Contains(err.Error(), "answered 400") || !strings.Contains(err.Error(), "nope") {
		t.Errorf("plan --against with an unknown model: %v\n%s", err, out)
	}
	// Without the token: the gateway's 401, said.
	t.Setenv("PICCOLO_ADMIN_TOKEN", "wrong")
	if _, err := run(t, "plan", "--against", sg.url, "-c", file); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("plan --against with a wrong token: %v", err)
	}
}
