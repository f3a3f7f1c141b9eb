package faults_test

import (
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/backends/faults"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs []string
		want  faults.Set
		str   string
	}{
		{"nothing", nil, faults.Set{}, "none"},
		{"none", []string{"none"}, faults.Set{}, "none"},
		{"each word", []string{"refuse", "reset", "hang", "malformed"}, faults.Set{Refuse: true, Reset: true, Hang: true, Malformed: true}, "refuse,reset,hang,malformed"},
		{"comma-separated values", []string{"slow=3, fail=0.1"}, faults.Set{Slow: 3, Fail: 0.1}, "slow=3,fail=0.1"},
		{"last value wins", []string{"slow=2", "slow=4"}, faults.Set{Slow: 4}, "slow=4"},
		{"slow 1 is off", []string{"slow=1"}, faults.Set{Slow: 1}, "none"},
		{"every call fails", []string{"fail=1"}, faults.Set{Fail: 1}, "fail=1"},
		{"a share of batches slow", []string{"slow=10,slowshare=0.1"}, faults.Set{Slow: 10, SlowShare: 0.1}, "slow=10,slowshare=0.1"},
		{"slowshare 1 is every batch", []string{"slow=2,slowshare=1"}, faults.Set{Slow: 2, SlowShare: 1}, "slow=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := faults.Parse(tc.specs)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || got.String() != tc.str {
				t.Errorf("Parse(%q) = %+v (%s); want %+v (%s)", tc.specs, got, got, tc.want, tc.str)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want string // part of the error
	}{
		{"crash", `"crash" is not a fault; allowed: refuse, reset, hang, slow=K`},
		{"slow", "slow wants a number"},
		{"slow=x", "slow wants a number"},
		{"slow=0.5", "want a factor 1 ≤ k ≤ 1000"},
		{"slow=NaN", "want a factor"},
		{"slow=5000", "want a factor"},
		{"fail=1.5", "want a share 0 ≤ p ≤ 1"},
		{"fail=-0.1", "want a share"},
		{"hang=1", "hang takes no value"},
		{"none=1", "takes no value"},
		{"slowshare=0.1", "slowshare 0.1 without slow"},
		{"slow=1,slowshare=0.1", "without slow"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := faults.Parse([]string{tc.spec})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse(%q): %v; want an error containing %q", tc.spec, err, tc.want)
			}
		})
	}
}
