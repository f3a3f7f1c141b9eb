package dataplane

import (
	"fmt"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/backends/faults"
)

// A raced module (Cloudflow's competitive execution) keeps answering in time
// while one of its two machines hangs: every batch also runs on the other,
// whose answer is taken at once, and the hanging call is cancelled. Without
// the race, the same hang costs requests their deadline (hedging off).
func TestRaceAnswersPastAHangingMachine(t *testing.T) {
	for _, race := range []int{2, 1} {
		t.Run(fmt.Sprintf("race=%d", race), func(t *testing.T) {
			// 40 req/s: one machine carries it; raced on two, the plan
			// holds two machines, one per backend.
			cfg := faultConfigAt(40, race)
			rig := startRig(t, cfg, 2, LiveOptions{HedgeBudget: -1})
			lm := rig.module()
			if max(lm.race, 1) != race {
				t.Fatalf("module race %d, want %d", lm.race, race)
			}
			if race == 2 && len(lm.clients) != 2 {
				t.Fatalf("raced plan placed on %d backends, want 2", len(lm.clients))
			}
			if err := rig.inj[0].Set(faults.Set{Hang: true}); err != nil {
				t.Fatal(err)
			}
			res := rig.openLoop(t, 40, time.Second, nil)
			st := rig.sw.Health().Stats()
			t.Logf("race=%d: %v; races won %d lost %d, race machine time %v", race, res, st.RacesWon, st.RacesLost, st.RaceTime.Round(time.Millisecond))
			if res.dup.Load() != 0 {
				t.Errorf("%v; want each request answered once", res)
			}
			if race == 2 {
				if bad := res.failed.Load() + res.late.Load(); bad > 0 {
					t.Errorf("raced: %v; want every request in time while gpu-0 hangs", res)
				}
				if st.RacesWon+st.RacesLost == 0 {
					t.Errorf("no batch was raced")
				}
			} else if res.ok.Load() == res.sent.Load() {
				t.Errorf("unraced: %v; the hang on the plan's machine should cost requests", res)
			}
		})
	}
}
