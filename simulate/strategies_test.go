package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/arrival"
)

// halved is an arrival process from outside the built-in registry: constant
// gaps at half the rate asked for.
type halved struct{}

func (halved) Name() string                    { return "halved" }
func (halved) OwnRate() bool                   { return false }
func (halved) MeanRate(s arrival.Spec) float64 { return s.Rate / 2 }
func (halved) New(s arrival.Spec, seed uint64) (arrival.Process, error) {
	return arrival.New("constant", s.Rate/2, 0, seed)
}

// TestOutsideArrivalProcess registers an arrival process beside the built-in
// ones and simulates with it by name, as main does with --arrival: half the
// requests of the constant process arrive. The built-in registry does not
// know it, and says what it knows.
func TestOutsideArrivalProcess(t *testing.T) {
	kinds, err := arrival.Builtin().With(halved{})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Arrival: "constant", RatePerSec: 100, Duration: 10 * time.Second, Seed: 1}
	full, err := Run(fig3(), o)
	if err != nil {
		t.Fatal(err)
	}
	if full.Requests < 900 {
		t.Fatalf("constant at 100 req/s for 10 s: %d requests", full.Requests)
	}
	o.Arrival, o.Arrivals = "halved", kinds
	half, err := Run(fig3(), o)
	if err != nil {
		t.Fatal(err)
	}
	if 2*half.Requests < full.Requests-2 || 2*half.Requests > full.Requests+2 {
		t.Errorf("halved: %d requests, want half of constant's %d", half.Requests, full.Requests)
	}
	o.Arrivals = nil
	if _, err := Run(fig3(), o); err == nil || !strings.Contains(err.Error(), `unknown arrival process "halved"; allowed: constant, poisson, gamma, mmpp, trace`) {
		t.Errorf("halved without its registry: %v, want the allowed processes", err)
	}
}
