package api

import (
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Tail is a module's measured heavy tail: a share Share of its batches, drawn
// independently, take Factor times their profiled duration; the others take
// the profiled duration. It is what `piccolo backend --fault
// slow=Factor,slowshare=Share` emulates (backends/faults). Share is in
// [0, MaxTailShare], Factor in [1, MaxTailFactor]. The config writes it as
// {share: 0.1, factor: 8}, both keys given. The planner sizes the module for
// it and, with race: auto, chooses whether to race it (Cloudflow's
// competitive execution; docs/planner.md, "Choosing the race from a measured
// tail"); the simulator draws each batch's duration from it.
type Tail struct {
	Share  float64 `yaml:"share" json:"share"`
	Factor float64 `yaml:"factor" json:"factor"`
}

// Bounds of a Tail: at most half the batches slow (beyond that the "tail" is
// the module's usual duration: profile it), at most 100× slower (beyond that
// a batch is hung, which the gateway's hedging and health checks handle).
const (
	MaxTailShare  = 0.5
	MaxTailFactor = 100
)

// wantTail is what a config's tail must be.
const wantTail = "a measured tail such as {share: 0.1, factor: 8} (share of the batches take factor × their profiled duration)"

// UnmarshalYAML reads t as the config writes it: a mapping with both share
// and factor, each a number (their ranges are the config validator's).
// Errors name the key that is missing, repeated, unknown or not a number.
func (t *Tail) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("want %s; got %s", wantTail, describe(n))
	}
	var out Tail
	var share, factor bool
	for x := 0; x+1 < len(n.Content); x += 2 {
		key, val := resolve(n.Content[x]), resolve(n.Content[x+1])
		if key == nil || val == nil || key.Kind != yaml.ScalarNode {
			return fmt.Errorf("want %s; got a key that is not share or factor", wantTail)
		}
		var seen *bool
		var dst *float64
		var want string
		switch key.Value {
		case "share":
			seen, dst, want = &share, &out.Share, "a share of the batches from 0 to 0.5 such as 0.1"
		case "factor":
			seen, dst, want = &factor, &out.Factor, "a factor from 1 to 100 such as 8"
		default:
			return fmt.Errorf("unknown key %s: want %s", describe(key), wantTail)
		}
		if *seen {
			return fmt.Errorf("key %s repeated: give share and factor once each", key.Value)
		}
		*seen = true
		if err := decFloat(dst, want)(val); err != nil {
			return fmt.Errorf("%s: %w", key.Value, err)
		}
	}
	switch {
	case !share && !factor:
		return fmt.Errorf("want %s; got an empty mapping", wantTail)
	case !share:
		return fmt.Errorf("share missing: give both share and factor, such as {share: 0.1, factor: %s}", strconv.FormatFloat(out.Factor, 'g', -1, 64))
	case !factor:
		return fmt.Errorf("factor missing: give both share and factor, such as {share: %s, factor: 8}", strconv.FormatFloat(out.Share, 'g', -1, 64))
	}
	*t = out
	return nil
}

// MarshalYAML writes t as the config reads it: a flow mapping {share, factor}.
func (t Tail) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	for _, kv := range [...]struct {
		k string
		v float64
	}{{"share", t.Share}, {"factor", t.Factor}} {
		n.Content = append(n.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Value: kv.k},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(kv.v, 'g', -1, 64)})
	}
	return n, nil
}

// Race is how many machines of its group each batch of a module runs on at
// once, the first answer taken and the other calls cancelled (Cloudflow's
// competitive execution): 0 or 1, one machine (no race); at most MaxRace; or
// RaceAuto, the planner chooses from the module's Tail (no race without
// one). The config writes a whole number or auto; the plan records the
// number chosen (ModulePlan.Race).
type Race int

// RaceAuto is the Race that asks the planner to choose (config: race: auto).
const RaceAuto Race = -1

// wantRace is what a config's race must be.
const wantRace = "a number of machines (whole number ≥ 1) such as 2, or auto (the planner chooses from the module's tail)"

// UnmarshalYAML reads r as the config writes it: a whole number ≥ 0, or auto.
// A negative number is refused here, so that no number reads as RaceAuto.
func (r *Race) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && n.Value == "auto" {
		*r = RaceAuto
		return nil
	}
	var k int
	if err := decInt(&k, wantRace)(n); err != nil {
		return err
	}
	if k < 0 {
		return fmt.Errorf("want %s; got %d", wantRace, k)
	}
	*r = Race(k)
	return nil
}

// MarshalYAML writes r as the config reads it: auto for RaceAuto, else the
// number.
func (r Race) MarshalYAML() (any, error) {
	if r == RaceAuto {
		return "auto", nil
	}
	return int(r), nil
}
