package api

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration that reads and writes YAML as a Go duration string
// ("250ms", "2s"). A bare number is rejected: the unit must be explicit.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Seconds returns d in seconds.
func (d Duration) Seconds() float64 { return time.Duration(d).Seconds() }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a duration such as 250ms or 2s")
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("%q is not a duration: want a number with a unit, such as 250ms or 2s", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes d as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Source is where a config item was read: file and line. The loader fills it;
// it is never read from YAML.
type Source struct {
	File string `yaml:"-" json:"-"`
	Line int    `yaml:"-" json:"-"`
}

// String formats s as "file:line".
func (s Source) String() string {
	if s.File == "" {
		return "<config>"
	}
	return fmt.Sprintf("%s:%d", s.File, s.Line)
}

// Hardware is one kind of device with a unit price in cost units per machine-hour
// (paper §III-A: heterogeneous hardware at various prices).
type Hardware struct {
	Name  string  `yaml:"name"`
	Price float64 `yaml:"price"`
	// LinkLatency and LinkMbps describe the network between the gateway
	// and a backend of this type: the one-way latency and the bandwidth in
	// each direction, in Mbit/s (0: not counted). With them the planner
	// counts each batch's transfer (Transfer) in its duration: a lane of the
	// live gateway is busy for the whole round trip (docs/locality.md, "The
	// link in the plan").
	LinkLatency Duration `yaml:"link_latency,omitempty"`
	LinkMbps    float64  `yaml:"link_mbps,omitempty"`
	Source      `yaml:",inline"`
}

// Transfer returns the time a batch of items moving bytesPerItem bytes
// (its inputs and outputs together) spends on h's link: the latency there
// and back plus the bytes at LinkMbps. Zero without a link.
func (h Hardware) Transfer(items, bytesPerItem int) time.Duration {
	t := 2 * time.Duration(h.LinkLatency)
	if h.LinkMbps > 0 && bytesPerItem > 0 {
		t += time.Duration(float64(items) * float64(bytesPerItem) * 8 / (h.LinkMbps * 1e6) * float64(time.Second))
	}
	return t
}

// ProfileEntry is one measured point of a profile: batch size b, concurrency c
// (instances sharing one device: spatial multiplexing) and the duration d of one
// batch on one instance.
type ProfileEntry struct {
	Batch       int      `yaml:"batch"`
	Concurrency int      `yaml:"concurrency"`
	Duration    Duration `yaml:"duration"`
	Source      `yaml:",inline"`
}

// Throughput returns t = c·b/d in requests per second.
func (e ProfileEntry) Throughput() float64 {
	c := e.Concurrency
	if c == 0 {
		c = 1
	}
	return float64(c*e.Batch) / e.Duration.Seconds()
}

// Profile holds the measured entries of one model on one hardware type.
// Accuracy, when set (in (0, 1]), is the model's accuracy measured on a labelled
// set (`piccolo profile --accuracy`); a variant that gives none takes it from
// here (docs/variants.md).
type Profile struct {
	Model    string  `yaml:"model"`
	Hardware string  `yaml:"hardware"`
	Accuracy float64 `yaml:"accuracy,omitempty"`
	// InputBytes and OutputBytes are the bytes one item of the model sends
	// and receives (0: not counted): with the hardware's link
	// (Hardware.Transfer) the planner adds their transfer to each batch.
	InputBytes  int            `yaml:"input_bytes,omitempty"`
	OutputBytes int            `yaml:"output_bytes,omitempty"`
	Entries     []ProfileEntry `yaml:"entries"`
	Source      `yaml:",inline"`
}

// MaxItemBytes bounds Profile.InputBytes and OutputBytes: 1 TiB an item.
const MaxItemBytes = 1 << 40

// MaxLinkLatency bounds Hardware.LinkLatency.
const MaxLinkLatency = 10 * time.Second

// Variant is one model that can serve a module (JellyBean §4: a larger network,
// another input size, a quantized copy) and its accuracy in (0, 1]: the share of
// the module's outputs that are right when its inputs are right. Accuracy 0 in a
// Config built in Go means "take it from the model's profile".
type Variant struct {
	Model    string  `yaml:"model"`
	Accuracy float64 `yaml:"accuracy,omitempty"`
	Source   `yaml:",inline"`
}

// Module is a node of a session's DAG: a model run at a request rate (req/s), after
// the modules it names in After (none: it takes the session's input). A module
// names either one Model or several Variants, of which the planner picks one
// (docs/variants.md).
//
// Join says when a module with several parents runs: JoinAllOf (the default,
// "" or "allof") once every parent has resolved, on their outputs together;
// JoinAnyOf ("anyof", Cloudflow's anyof operator) on the outputs of the first
// parent to finish, the other parents' work cancelled (docs/planner.md,
// "Related systems"). Race, when above 1, sends every batch of the module to
// that many machines of its group at once and takes the first answer
// (Cloudflow's competitive execution); the planner provisions Race times the
// machines for it. RaceAuto lets the planner choose from Tail, the module's
// measured heavy tail (nil: none measured; every batch takes its profiled
// duration).
type Module struct {
	Name     string    `yaml:"name"`
	Model    string    `yaml:"model,omitempty"`
	Variants []Variant `yaml:"variants,omitempty"`
	Rate     float64   `yaml:"rate"`
	After    []string  `yaml:"after,omitempty,flow"`
	Join     string    `yaml:"join,omitempty"`
	Race     Race      `yaml:"race,omitempty"`
	Tail     *Tail     `yaml:"tail,omitempty"`
	// FanOut, on a module with one parent, is the measured distribution of
	// its items per item of the parent (see FanOut); it makes the module a
	// fan-out whatever its rate, and the planner's simulations draw from it.
	FanOut FanOut `yaml:"fanout,omitempty"`
	Source `yaml:",inline"`
}

// Join values of Module.Join.
const (
	JoinAllOf = "allof"
	JoinAnyOf = "anyof"
)

// MaxRace bounds Module.Race: each batch occupies that many machines.
const MaxRace = 8

// AnyOf reports whether m runs on the first of its parents to finish
// (Join is JoinAnyOf).
func (m *Module) AnyOf() bool { return m.Join == JoinAnyOf }

// Racers returns how many machines each batch of m is sent to: Race, or 1
// (RaceAuto too, until the planner has chosen).
func (m *Module) Racers() int { return max(int(m.Race), 1) }

// MayRace reports whether m's batches may run on several machines at once:
// Race above 1, or RaceAuto.
func (m *Module) MayRace() bool { return m.Race > 1 || m.Race == RaceAuto }

// Choices returns the models that may serve m: its Variants, or its one Model
// with accuracy 1 (a module without variants is taken as exact).
func (m *Module) Choices() []Variant {
	if len(m.Variants) > 0 {
		return m.Variants
	}
	return []Variant{{Model: m.Model, Accuracy: 1, Source: m.Source}}
}

// Session is one application: a DAG of modules and an end-to-end latency SLO
// (paper §III-A). Accuracy, when set, is the end-to-end accuracy target in
// [0, 1] the planner's choice of variants must meet (the product of the chosen
// variants' accuracies, or the combination's JointAccuracy where listed,
// docs/variants.md); nil means the most accurate combination.
type Session struct {
	Name     string   `yaml:"name"`
	SLO      Duration `yaml:"slo"`
	Accuracy *float64 `yaml:"accuracy,omitempty"`
	Modules  []Module `yaml:"modules"`
	// JointAccuracy lists end-to-end accuracies measured for whole variant
	// combinations (JellyBean's profiles of interactions): where a
	// combination is listed, its measured accuracy replaces the product of
	// its variants' accuracies, which over-promises when the modules' errors
	// are correlated.
	JointAccuracy []JointAccuracy `yaml:"joint_accuracy,omitempty"`
	Source        `yaml:",inline"`
}

// JointAccuracy is one variant combination's measured end-to-end accuracy:
// Variants names, for every module of the session that lists variants, the
// variant (model) the combination runs; Accuracy is in [0, 1] (the share of
// right outputs on the labelled set, `piccolo profile --accuracy --joint`).
type JointAccuracy struct {
	Variants map[string]string `yaml:"variants"`
	Accuracy float64           `yaml:"accuracy"`
	Source   `yaml:",inline"`
}

// JointKey returns a canonical key of a variant combination (module →
// model), for looking up JointAccuracy entries: "module=model" pairs sorted
// by module, joined by ",".
func JointKey(variants map[string]string) string {
	var b strings.Builder
	for i, mod := range slices.Sorted(maps.Keys(variants)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(mod)
		b.WriteByte('=')
		b.WriteString(variants[mod])
	}
	return b.String()
}

// Backend is one statically listed backend instance (membership `static`).
type Backend struct {
	ID       string `yaml:"id"`
	Address  string `yaml:"address"`
	Hardware string `yaml:"hardware"`
	// TLS: the backend serves gRPC over TLS (`piccolo backend --tls-cert`);
	// the gateway verifies it with --backend-ca (else the system's roots).
	TLS    bool `yaml:"tls,omitempty"`
	Source `yaml:",inline"`
}

// Config is the merged, validated content of one or more config files.
// Produced by Load; immutable afterwards.
type Config struct {
	Hardware []Hardware `yaml:"hardware,omitempty"`
	Profiles []Profile  `yaml:"profiles,omitempty"`
	Sessions []Session  `yaml:"sessions,omitempty"`
	Backends []Backend  `yaml:"backends,omitempty"`
	// Membership is "static" (the default: Backends above) or "consul".
	Membership string `yaml:"membership,omitempty"`
}

// HardwareByName returns the hardware type called name.
func (c *Config) HardwareByName(name string) (Hardware, bool) {
	for _, h := range c.Hardware {
		if h.Name == name {
			return h, true
		}
	}
	return Hardware{}, false
}

// Session returns the session called name.
func (c *Config) Session(name string) (*Session, bool) {
	for i := range c.Sessions {
		if c.Sessions[i].Name == name {
			return &c.Sessions[i], true
		}
	}
	return nil, false
}

// ModelAccuracy returns the accuracy a profile of model gives (the largest, if
// several hardware types give one), or 0 when none does.
func (c *Config) ModelAccuracy(model string) float64 {
	best := 0.0
	for _, p := range c.Profiles {
		if p.Model == model && p.Accuracy > best {
			best = p.Accuracy
		}
	}
	return best
}

// ProfilesOf returns every profile of model, one per hardware type.
func (c *Config) ProfilesOf(model string) []Profile {
	var out []Profile
	for _, p := range c.Profiles {
		if p.Model == model {
			out = append(out, p)
		}
	}
	return out
}
