package main

import (
	"bytes"
	"os"
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
