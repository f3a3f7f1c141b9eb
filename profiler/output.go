package profiler

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/piccolo-serving/piccolo/api"
)

// Profile returns the measured profile: one entry per point, duration = the
// point's Duration rounded to the microsecond, sorted by concurrency then batch.
func (r *Result) Profile() api.Profile {
	p := api.Profile{Model: r.Model, Hardware: r.Hardware, Entries: make([]api.ProfileEntry, 0, len(r.Points))}
	for _, pt := range r.Points {
		d := pt.Duration.Round(time.Microsecond)
		if d <= 0 {
			d = time.Microsecond
		}
		p.Entries = append(p.Entries, api.ProfileEntry{Batch: pt.Batch, Concurrency: pt.Concurrency, Duration: api.Duration(d)})
	}
	slices.SortStableFunc(p.Entries, func(a, b api.ProfileEntry) int {
		if a.Concurrency != b.Concurrency {
			return a.Concurrency - b.Concurrency
		}
		return a.Batch - b.Batch
	})
	return p
}

// profileFile is the YAML document WriteYAML writes: the keys api.Load reads.
type profileFile struct {
	Hardware []yamlHardware `yaml:"hardware,omitempty"`
	Profiles []yamlProfile  `yaml:"profiles"`
}

type yamlHardware struct {
	Name  string  `yaml:"name"`
	Price float64 `yaml:"price"`
}

type yamlProfile struct {
	Model    string      `yaml:"model"`
	Hardware string      `yaml:"hardware"`
	Entries  []yamlEntry `yaml:"entries"`
}

// yamlEntry is written in flow style, one entry a line, as the configs are.
type yamlEntry struct {
	Batch       int          `yaml:"batch"`
	Concurrency int          `yaml:"concurrency"`
	Duration    api.Duration `yaml:"duration"`
}

// WriteYAML writes r's profile as config YAML that api.Load reads: `profiles:`
// only, or, when price > 0 (cost units per machine-hour), also a `hardware:`
// entry {name: r.Hardware, price}. A comment above says how it was measured.
func WriteYAML(w io.Writer, r *Result, price float64) error {
	if price < 0 || math.IsNaN(price) || math.IsInf(price, 0) {
		return fmt.Errorf("%w: price %v: want a price > 0 per machine-hour, or 0 to leave the hardware entry out", ErrBadOptions, price)
	}
	prof := r.Profile()
	f := profileFile{Profiles: []yamlProfile{{Model: prof.Model, Hardware: prof.Hardware}}}
	if price > 0 {
		f.Hardware = []yamlHardware{{Name: r.Hardware, Price: price}}
	}
	for _, e := range prof.Entries {
		f.Profiles[0].Entries = append(f.Profiles[0].Entries, yamlEntry{Batch: e.Batch, Concurrency: e.Concurrency, Duration: e.Duration})
	}
	var doc yaml.Node
	if err := doc.Encode(f); err != nil {
		return err
	}
	// Entries in flow style: {batch: 4, concurrency: 1, duration: 12.5ms}.
	for _, e := range entryNodes(&doc) {
		e.Style = yaml.FlowStyle
	}
	doc.HeadComment = fmt.Sprintf("Measured by piccolo profile against %s: duration = p%s of the call latencies,\nwarm-up excluded; %s.",
		r.Target, formatPercentile(r.Percentile), time.Now().UTC().Format("2006-01-02"))
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	return enc.Close()
}

// entryNodes finds the mapping nodes of profiles[*].entries[*] in doc.
func entryNodes(doc *yaml.Node) []*yaml.Node {
	var out []*yaml.Node
	value := func(m *yaml.Node, key string) *yaml.Node {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				return m.Content[i+1]
			}
		}
		return nil
	}
	if profiles := value(doc, "profiles"); profiles != nil {
		for _, p := range profiles.Content {
			if entries := value(p, "entries"); entries != nil {
				out = append(out, entries.Content...)
			}
		}
	}
	return out
}

func formatPercentile(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) }

// WriteTable writes one line per point: batch, concurrency, calls, p50, p90, p99
// and max latency (ms), the profile throughput c·b/d and the measured items/s.
func WriteTable(w io.Writer, r *Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "batch\tconcurrency\tcalls\tp50 ms\tp90 ms\tp99 ms\tmax ms\tc·b/d items/s\tmeasured items/s\t\n")
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) }
	for _, p := range r.Points {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t\n",
			p.Batch, p.Concurrency, p.Calls, ms(p.P50), ms(p.P90), ms(p.P99), ms(p.Max), p.Throughput, p.ItemsPerSec)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "profile duration d = p%s of each point's call latencies (client side, warm-up excluded)\n", formatPercentile(r.Percentile))
	return err
}

// ParseSizes parses a comma-separated list of whole numbers ≥ 1, such as
// "1,2,4,8", as the --batches and --concurrency flags take it. Spaces around
// tokens are allowed. An error names flag, the bad token and what is allowed;
// a number given twice and an empty list are errors too.
func ParseSizes(flag, s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%s is empty: want a comma-separated list of whole numbers ≥ 1, such as 1,2,4,8", flag)
	}
	var out []int
	for _, tok := range strings.Split(s, ",") {
		t := strings.TrimSpace(tok)
		n, err := strconv.Atoi(t)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s %q: %q is not a whole number ≥ 1; want a comma-separated list such as 1,2,4,8", flag, s, t)
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("%s %q: %d is given twice", flag, s, n)
		}
		out = append(out, n)
	}
	return out, nil
}
