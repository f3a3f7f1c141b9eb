package api

import (
	"math"
	"sort"
)

// MaxFanOutItems bounds the items one parent item may fan out to in a
// FanOut (and the simulator's items per parent item).
const MaxFanOutItems = 1000

// FanOutShare is one point of a FanOut: Share of the parent's items (in
// [0, 1]) fan out to Items items each.
type FanOutShare struct {
	Items int     `json:"items"`
	Share float64 `json:"share"`
}

// FanOut is a fan-out module's measured distribution of items per item of
// its one parent (Llama's input-dependent flow: a detector that finds no
// object in one image and twelve in the next). In a loaded config and in a
// plan it is normalised: Items ascending and distinct, Shares summing to 1.
// The config writes it as a mapping from items to a weight, such as the
// counts of a measurement ({0: 120, 1: 310, 12: 9}); the module's rate must
// be its parent's times the Mean. A module without one is planned and
// simulated at its rate's fixed ratio to its parent.
type FanOut []FanOutShare

// Mean returns the mean items per parent item: Σ Items × Share.
func (f FanOut) Mean() float64 {
	var m float64
	for _, s := range f {
		m += float64(s.Items) * s.Share
	}
	return m
}

// Max returns the largest Items with a positive Share (0 for an empty FanOut).
func (f FanOut) Max() int {
	for i := len(f) - 1; i >= 0; i-- {
		if f[i].Share > 0 {
			return f[i].Items
		}
	}
	return 0
}

// Normalized returns f sorted by Items with its weights scaled to sum to 1,
// and whether it could be: every weight finite and ≥ 0, their sum > 0, every
// Items in [0, MaxFanOutItems] and listed once. f is not modified.
func (f FanOut) Normalized() (FanOut, bool) {
	var sum float64
	for _, s := range f {
		if !(s.Share >= 0) || math.IsInf(s.Share, 0) || s.Items < 0 || s.Items > MaxFanOutItems {
			return nil, false
		}
		sum += s.Share
	}
	if !(sum > 0) || math.IsInf(sum, 0) {
		return nil, false
	}
	out := make(FanOut, len(f))
	copy(out, f)
	sort.Slice(out, func(i, j int) bool { return out[i].Items < out[j].Items })
	for i := range out {
		if i > 0 && out[i].Items == out[i-1].Items {
			return nil, false
		}
		out[i].Share /= sum
	}
	return out, true
}

// Cumulative returns the running sums of f's Shares (the last forced to 1),
// for Draw. f must be normalised.
func (f FanOut) Cumulative() []float64 {
	c := make([]float64, len(f))
	var s float64
	for i, x := range f {
		s += x.Share
		c[i] = s
	}
	if len(c) > 0 {
		c[len(c)-1] = 1
	}
	return c
}

// Draw returns the Items at cumulative share u in [0, 1): the inverse of the
// distribution, so a uniform u draws items per parent item. cum is
// f.Cumulative(). It allocates nothing.
func (f FanOut) Draw(cum []float64, u float64) int {
	i := sort.SearchFloat64s(cum, u)
	for i < len(cum) && cum[i] <= u { // SearchFloat64s finds the first ≥ u: skip ties at u
		i++
	}
	if i >= len(f) {
		i = len(f) - 1
	}
	return f[i].Items
}
