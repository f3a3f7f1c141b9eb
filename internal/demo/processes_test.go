package demo

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// A child that exits because a port the demo picked was taken in the meantime
// is started again on fresh ports; one that fails for another reason, or keeps
// losing the race, is reported with its log.
func TestChildThatLostAPortRaceStartsAgain(t *testing.T) {
	for _, tc := range []struct {
		name       string
		failures   int    // runs that exit before the one that stays up
		message    string // what the failing runs print
		wantErr    string // "" when the child is expected to be running
		wantRuns   int
		wantChange bool // the restarted child listens on other addresses
	}{
		{name: "port taken once", failures: 1, message: "bind: address already in use", wantRuns: 2, wantChange: true},
		{name: "port taken every time", failures: 99, message: "bind: address already in use", wantErr: "exited early", wantRuns: portRetries + 1},
		{name: "other failure", failures: 1, message: "config: no such file", wantErr: "exited early", wantRuns: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procs := &processes{}
			defer procs.stop(io.Discard)
			runs := 0
			var seen [][]string
			c, err := procs.start("sh", 2, func(addrs []string) []string {
				runs++
				seen = append(seen, addrs)
				if runs <= tc.failures {
					return []string{"-c", "echo 'listen tcp " + addrs[0] + ": " + tc.message + "'; exit 1"}
				}
				return []string{"-c", "exec sleep 60"}
			}, filepath.Join(t.TempDir(), "child.log"))
			if err != nil {
				t.Fatal(err)
			}
			var got error
			for i := 0; i <= portRetries+1; i++ {
				<-c.done // the failing run has ended (or the last one is up: see below)
				if got = procs.exited(); got != nil || runs > tc.failures {
					break
				}
			}
			if runs != tc.wantRuns {
				t.Errorf("%d runs, want %d", runs, tc.wantRuns)
			}
			switch {
			case tc.wantErr == "" && got != nil:
				t.Fatalf("exited: %v, want the child running", got)
			case tc.wantErr != "" && (got == nil || !strings.Contains(got.Error(), tc.wantErr) || !strings.Contains(got.Error(), "child.log")):
				t.Fatalf("exited: %v, want an error with %q naming the log", got, tc.wantErr)
			}
			if tc.wantChange && (c.addr(0) == seen[0][0] && c.addr(1) == seen[0][1]) {
				t.Errorf("restarted on the same addresses %v", seen[0])
			}
			if tc.wantErr == "" {
				select {
				case <-c.done:
					t.Fatal("the restarted child is not running")
				default:
				}
			}
		})
	}
}

// A child seen listening keeps its addresses (the demo may have written them
// into backends.yaml): if it exits later, even saying a port was taken, that
// is reported, not papered over by a restart elsewhere.
func TestConfirmedChildIsNotMoved(t *testing.T) {
	procs := &processes{}
	defer procs.stop(io.Discard)
	runs := 0
	c, err := procs.start("sh", 1, func(addrs []string) []string {
		runs++
		return []string{"-c", "sleep 0.2; echo 'listen tcp " + addrs[0] + ": bind: address already in use'; exit 1"}
	}, filepath.Join(t.TempDir(), "child.log"))
	if err != nil {
		t.Fatal(err)
	}
	procs.confirm(c)
	<-c.done
	if err := procs.exited(); err == nil || !strings.Contains(err.Error(), "exited early") {
		t.Errorf("exited: %v, want the confirmed child reported", err)
	}
	if runs != 1 {
		t.Errorf("%d runs, want 1", runs)
	}
}
