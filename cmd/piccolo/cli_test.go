package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestUsageErrors: a command line cobra or a command refuses is a usage error
// (main exits 2), a command that runs and fails is not (exit 1).
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage bool
	}{
		{[]string{"bogus"}, true},
		{[]string{"gateway", "--bogus"}, true},
		{[]string{"gateway", "--listen"}, true},
		{[]string{"version", "extra"}, true},
		{[]string{"plan", "--slack", "x"}, true},
		{[]string{"plan", "-c", "/nonexistent/piccolo.yaml"}, false},
	} {
		root := newRootCmd()
		root.SetArgs(tc.args)
		root.SetOut(new(bytes.Buffer))
		root.SetErr(new(bytes.Buffer))
		err := root.Execute()
		if err == nil {
			t.Errorf("%v: no error", tc.args)
			continue
		}
		if got := isUsageError(err); got != tc.usage {
			t.Errorf("%v: %v: usage error %v, want %v", tc.args, err, got, tc.usage)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		root := newRootCmd()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if got := out.String(); !strings.HasPrefix(got, "piccolo "+version) || strings.Count(got, "\n") != 1 {
			t.Errorf("%v printed %q, want one line \"piccolo %s...\"", args, got, version)
		}
	}
}
