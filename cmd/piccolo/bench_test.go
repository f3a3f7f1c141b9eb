package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchPlannerNoBarOffTerminal runs the planner benchmark with stdout and stderr
// on a buffer, as in a pipe or a CI log: the table comes out, the progress bar
// does not.
func TestBenchPlannerNoBarOffTerminal(t *testing.T) {
	out, err := run(t, "bench", "planner", "--workloads", "2", "--seed", "1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "| piccolo |") {
		t.Errorf("no table row for piccolo:\n%s", out)
	}
	if strings.Contains(out, "planning workloads") || strings.Contains(out, "\r") {
		t.Errorf("progress bar written to a non-terminal:\n%q", out)
	}
}

// TestIsTerminal: a pipe and a buffer are not terminals, so the bar stays off.
func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if isTerminal(w) || isTerminal(&bytes.Buffer{}) {
		t.Error("a pipe or a buffer counted as a terminal")
	}
}

// TestBenchPaper runs the paper's evaluation on 5 workloads: every figure's CSV
// and PNG is written, the summary sets ours beside the paper's, Table II comes
// out, and bad flags get an error naming them.
func TestBenchPaper(t *testing.T) {
	dir := t.TempDir()
	out, err := run(t, "bench", "paper", "--workloads", "5", "--seed", "2", "-o", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"piccolo-nb", "+89.6%", "Table II", "| 2 | 0.40 (4) | 0.50 (4) | 4.00 | 4+4, 4.00 |",
		"InferLine plnr", "optimal's runtime / piccolo's", "throughput per machine"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"fig4a", "fig4b", "fig5", "fig6", "fig7", "fig8", "fig9", "fig10", "fig11", "runtime", "brute"} {
		for _, ext := range []string{".csv", ".png"} {
			if _, err := os.Stat(filepath.Join(dir, f+ext)); err != nil {
				t.Error(err)
			}
		}
	}
	for _, args := range [][]string{
		{"bench", "paper", "--workloads", "0"},
		{"bench", "paper", "--workloads", "1", "--max-utilization", "0.5,0.8"},
		{"bench", "paper", "--workloads", "1", "--target", "2"},
	} {
		if out, err := run(t, args...); err == nil {
			t.Errorf("%v: no error\n%s", args, out)
		}
	}
}
