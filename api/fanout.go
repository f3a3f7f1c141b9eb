package api

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"go.yaml.in/yaml/v3"
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

// ProvisionedQuantile is the share of a fan-out module's parent items
// whose items the planner provisions machines for (planner's
// fanOutMachines): all but the last 0.1%. The control loop re-plans a
// fan-out whose measured Provisioned items need another number of batches
// (scheduler/replan, cause "fanout").
const ProvisionedQuantile = 0.999

// Provisioned returns the items at ProvisionedQuantile of f (normalised):
// the most items a parent item brings that the plan provisions for; 0 for
// an empty f.
func (f FanOut) Provisioned() int {
	if len(f) == 0 {
		return 0
	}
	return f.Draw(f.Cumulative(), ProvisionedQuantile)
}

// Count returns the sum of f's weights: the parent items of a measured
// FanOut whose weights are counts (replan.ModuleRate.FanOut).
func (f FanOut) Count() float64 {
	var n float64
	for _, s := range f {
		n += s.Share
	}
	return n
}

// SCV returns the squared coefficient of variation of f's items per parent
// item, Var/Mean² (queueing theory's SCV; 0 for a fixed count, 3 for 0 or
// 12 objects in three images of four), from its weights whether or not they
// are normalised; 0 when f is empty or its mean is 0.
func (f FanOut) SCV() float64 {
	var n, m1, m2 float64
	for _, s := range f {
		x := float64(s.Items)
		n += s.Share
		m1 += s.Share * x
		m2 += s.Share * x * x
	}
	if n <= 0 || m1 <= 0 {
		return 0
	}
	m1, m2 = m1/n, m2/n
	return max(m2-m1*m1, 0) / (m1 * m1)
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

// wantFanOut is what a config's fanout must be.
const wantFanOut = "a mapping from items per parent item to a weight, such as {0: 120, 1: 310, 4: 55, 12: 9} (measured counts)"

// UnmarshalYAML reads f as the config writes it: a mapping from items per
// parent item (whole numbers) to weights (numbers), as written (Normalized
// makes it a distribution; the config loader does). Errors name the first
// key or weight that is not a number and say what is wanted.
func (f *FanOut) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("want %s; got %s", wantFanOut, describe(n))
	}
	out := make(FanOut, 0, len(n.Content)/2)
	for x := 0; x+1 < len(n.Content); x += 2 {
		key, val := n.Content[x], n.Content[x+1]
		var s FanOutShare
		if err := decInt(&s.Items, "")(key); err != nil {
			return fmt.Errorf("key %s is not a whole number of items; want %s", describe(key), wantFanOut)
		}
		if err := decFloat(&s.Share, "a weight ≥ 0 such as 310")(val); err != nil {
			return fmt.Errorf("items %d: %w", s.Items, err)
		}
		out = append(out, s)
	}
	*f = out
	return nil
}

// MarshalYAML writes f as the config reads it: a flow mapping from items to
// share, in f's order, so that EncodeYAML's output loads back to f.
func (f FanOut) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	for _, s := range f {
		n.Content = append(n.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(s.Items)},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(s.Share, 'g', -1, 64)})
	}
	return n, nil
}
