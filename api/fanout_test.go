package api

import (
	"math"
	"slices"
	"testing"
)

// Drawing at evenly spaced u reproduces the shares, never draws an entry of
// share 0, and the mean is the weighted mean.
func TestFanOutDrawReproducesShares(t *testing.T) {
	f, ok := FanOut{{Items: 12, Share: 1}, {Items: 0, Share: 4}, {Items: 5, Share: 0}, {Items: 1, Share: 3}}.Normalized()
	if !ok {
		t.Fatal("a valid distribution was refused")
	}
	if f[0].Items != 0 || f[len(f)-1].Items != 12 {
		t.Fatalf("not sorted by items: %v", f)
	}
	if got, want := f.Mean(), (0*4+1*3+12*1)/8.0; math.Abs(got-want) > 1e-12 {
		t.Errorf("Mean = %v, want %v", got, want)
	}
	if f.Max() != 12 {
		t.Errorf("Max = %d, want 12", f.Max())
	}
	cum := f.Cumulative()
	const n = 80000
	count := map[int]int{}
	for i := range n {
		count[f.Draw(cum, (float64(i)+0.5)/n)]++
	}
	for items, want := range map[int]float64{0: 0.5, 1: 0.375, 12: 0.125, 5: 0} {
		if got := float64(count[items]) / n; math.Abs(got-want) > 1e-3 {
			t.Errorf("items %d drawn %.4f of the time, want %.4f", items, got, want)
		}
	}
	if got := f.Draw(cum, 0); got != 0 {
		t.Errorf("Draw(0) = %d, want 0", got)
	}
	if got := f.Draw(cum, math.Nextafter(1, 0)); got != 12 {
		t.Errorf("Draw(1-) = %d, want 12", got)
	}
}

func TestFanOutNormalizedRefuses(t *testing.T) {
	for name, f := range map[string]FanOut{
		"empty":        {},
		"all zero":     {{Items: 1, Share: 0}},
		"negative":     {{Items: 1, Share: 1}, {Items: 2, Share: -1}},
		"NaN":          {{Items: 1, Share: math.NaN()}},
		"infinite":     {{Items: 1, Share: math.Inf(1)}},
		"items < 0":    {{Items: -1, Share: 1}},
		"items > max":  {{Items: MaxFanOutItems + 1, Share: 1}},
		"listed twice": {{Items: 2, Share: 1}, {Items: 2, Share: 1}},
	} {
		if _, ok := f.Normalized(); ok {
			t.Errorf("%s: %v accepted", name, f)
		}
	}
}

// The measures the control loop reads off a measured distribution (counts,
// not normalised): the items the planner provisions for (99.9th
// percentile), the parent items counted, and the squared coefficient of
// variation that makes a fan-out's item count noisier than a Poisson count.
func TestFanOutMeasures(t *testing.T) {
	for _, tc := range []struct {
		name        string
		f           FanOut
		provisioned int
		count, scv  float64
	}{
		{"0 or 12, counts", FanOut{{Items: 0, Share: 1800}, {Items: 12, Share: 600}}, 12, 2400, 3},
		{"always 3", FanOut{{Items: 3, Share: 1}}, 3, 1, 0},
		{"one in 2000 brings 40", FanOut{{Items: 1, Share: 1999}, {Items: 40, Share: 1}}, 1, 2000, 0.7313},
		{"none", nil, 0, 0, 0},
		{"nothing found", FanOut{{Items: 0, Share: 5}}, 0, 5, 0},
	} {
		f := tc.f
		if n, ok := f.Normalized(); ok {
			f = n
		}
		if got := f.Provisioned(); got != tc.provisioned {
			t.Errorf("%s: Provisioned() = %d; want %d", tc.name, got, tc.provisioned)
		}
		if got := tc.f.Count(); got != tc.count {
			t.Errorf("%s: Count() = %g; want %g", tc.name, got, tc.count)
		}
		if got := tc.f.SCV(); math.Abs(got-tc.scv) > 1e-3 {
			t.Errorf("%s: SCV() = %.4f; want %.4f", tc.name, got, tc.scv)
		}
	}
}

// FanOuts: a distribution, a higher rate than the one parent, or the same
// rate as a fanned-out parent makes a module fan out; a lower rate (a
// branch), two parents or a source does not.
func TestSessionFanOuts(t *testing.T) {
	s := Session{Name: "s", Modules: []Module{
		{Name: "det", Rate: 10},
		{Name: "cls", Rate: 25, After: []string{"det"}},
		{Name: "rec", Rate: 25, After: []string{"cls"}},
		{Name: "rare", Rate: 2, After: []string{"det"}},
		{Name: "some", Rate: 5, After: []string{"det"}, FanOut: FanOut{{Items: 0, Share: 1}, {Items: 1, Share: 1}}},
		{Name: "join", Rate: 25, After: []string{"rec", "rare"}},
	}}
	got, err := s.FanOuts()
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, true, true, false, true, false}; !slices.Equal(got, want) {
		t.Errorf("FanOuts() = %v; want %v (det cls rec rare some join)", got, want)
	}
}
