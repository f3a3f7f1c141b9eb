package api

import (
	"math"
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
