package demo

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemoEmbeddedDefault builds the piccolo binary and runs the demo on its
// embedded default for a few seconds: backends and gateway start as children, every
// planned session is loaded and answers, the report and plots are written, and no
// child outlives the run.
func TestDemoEmbeddedDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts processes")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "piccolo")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/piccolo")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out, log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Duration: 6 * time.Second, OutDir: filepath.Join(dir, "out"), Binary: bin, Out: &out, Log: &log})
	t.Logf("log:\n%s\nreport:\n%s", log.String(), out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sessions) == 0 {
		t.Fatal("no session in the report")
	}
	for _, s := range res.Sessions {
		if s.Report == nil {
			t.Errorf("session %s was not loaded: %s", s.Name, s.NotPlannedError)
			continue
		}
		if s.Report.Sent == 0 || s.Report.OK == 0 || s.Report.SLOAttainment == nil {
			t.Errorf("session %s: sent %d, ok %d, attainment %v", s.Name, s.Report.Sent, s.Report.OK, s.Report.SLOAttainment)
		}
		if _, err := os.Stat(s.Plot); err != nil {
			t.Errorf("session %s: no latency plot: %v", s.Name, err)
		}
		if !strings.Contains(out.String(), s.Name) {
			t.Errorf("the report does not name session %s", s.Name)
		}
	}
	if !strings.Contains(log.String(), "stopped") {
		t.Error("the demo did not say it stopped its processes")
	}
}
