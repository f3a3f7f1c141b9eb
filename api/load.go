package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ErrInvalidConfig matches (errors.Is) every *ConfigError: Load, LoadBytes and
// Validate return only errors that match it.
var ErrInvalidConfig = errors.New("invalid config")

// ConfigError is one problem found in a config: where it is (File, Line, and the
// Field path, such as "sessions[traffic].modules[car].rate") and what is wrong
// and allowed (Msg). Err is the underlying cause when there is one (a file that
// cannot be read), for errors.Is. Line is 0 when the problem is not on one line
// (an unreadable file); File is empty for a Config built in Go.
type ConfigError struct {
	File  string
	Line  int
	Field string
	Msg   string
	Err   error
}

// Error formats e as "file:line: field: msg", leaving out the parts that are empty.
func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.File == "" {
		b.WriteString("<config>")
	} else {
		b.WriteString(e.File)
	}
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying cause, if any.
func (e *ConfigError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// NamedDoc is one in-memory config document for LoadBytes; Name stands for the
// file name in errors.
type NamedDoc struct {
	Name string
	Data []byte
}

// Load reads the YAML files in order, merges them, validates the result and
// returns it. Any file may hold any of the top-level keys hardware, profiles,
// sessions, backends and membership (a file may also hold several YAML documents
// separated by ---); lists are concatenated in file order, and a name defined
// twice is an error naming both places. Profile concurrency 0 or missing is
// normalised to 1. Every problem found is returned together, as errors.Join of
// *ConfigError sorted by file and line; each matches ErrInvalidConfig. An empty
// path list, a file that cannot be read, a path given twice and a YAML syntax
// error are errors too. The returned Config is immutable by contract.
func Load(paths ...string) (*Config, error) {
	if len(paths) == 0 {
		return nil, &ConfigError{Msg: "no config files given: want at least one YAML file"}
	}
	docs := make([]NamedDoc, 0, len(paths))
	var errs []*ConfigError
	seen := make(map[string]string, len(paths))
	for _, path := range paths {
		clean := filepath.Clean(path)
		if first, dup := seen[clean]; dup {
			errs = append(errs, &ConfigError{File: path, Msg: fmt.Sprintf("given twice (also as %s): list each config file once", first)})
			continue
		}
		seen[clean] = path
		data, err := os.ReadFile(path)
		if err != nil {
			cause := err
			var pe *fs.PathError
			if errors.As(err, &pe) {
				cause = pe.Err
			}
			errs = append(errs, &ConfigError{File: path, Msg: "cannot read config file: " + cause.Error(), Err: err})
			continue
		}
		docs = append(docs, NamedDoc{Name: path, Data: data})
	}
	return load(docs, errs)
}

// LoadBytes is Load for in-memory documents: each doc's Name is used as the file
// name in errors. It never panics, whatever the bytes.
func LoadBytes(docs ...NamedDoc) (*Config, error) {
	if len(docs) == 0 {
		return nil, &ConfigError{Msg: "no config documents given: want at least one"}
	}
	return load(docs, nil)
}

// Validate checks c with the same rules as Load and returns every problem found
// (errors.Join of *ConfigError), or nil. It does not modify c: a profile
// concurrency of 0 is accepted as meaning 1. Errors carry the File and Line of
// the item's Source when set.
func (c *Config) Validate() error {
	v := validator{c: c}
	v.run()
	if v.full {
		v.errs = append(v.errs, tooMany())
	}
	return joinErrors(v.errs)
}

// load parses docs into one Config, normalises and validates it. pre holds
// errors found before parsing (unreadable files); validation, which would then
// report references to the missing content, is skipped when there are any.
func load(docs []NamedDoc, pre []*ConfigError) (*Config, error) {
	cfg := &Config{}
	p := &parser{cfg: cfg, fields: make(map[fieldKey]fieldInfo), budget: maxNodes}
	p.errs = pre
	for _, d := range docs {
		p.file(d)
	}
	normalize(cfg)
	full := p.full
	if !full && len(pre) == 0 && !p.over {
		// Skipped otherwise: it would report references into unread files or
		// cut-off content.
		v := validator{c: cfg, fields: p.fields}
		v.run()
		p.errs = append(p.errs, v.errs...)
		full = v.full || len(p.errs) > maxErrors
	}
	if len(p.errs) > 0 {
		order := make(map[string]int, len(docs))
		for i, d := range docs {
			if _, ok := order[d.Name]; !ok {
				order[d.Name] = i
			}
		}
		sort.SliceStable(p.errs, func(i, j int) bool {
			a, b := p.errs[i], p.errs[j]
			oa, oka := order[a.File]
			ob, okb := order[b.File]
			if oka != okb {
				return !oka // errors not tied to a document (pre) first
			}
			if oa != ob {
				return oa < ob
			}
			return a.Line < b.Line
		})
		if full {
			p.errs = append(p.errs[:min(len(p.errs), maxErrors)], tooMany())
		}
		return nil, joinErrors(p.errs)
	}
	return cfg, nil
}

// normalize applies the documented defaults: concurrency 0 means 1; a variant
// without accuracy takes its model's profiled accuracy.
func normalize(c *Config) {
	for i := range c.Sessions {
		for j := range c.Sessions[i].Modules {
			vs := c.Sessions[i].Modules[j].Variants
			for x := range vs {
				if vs[x].Accuracy == 0 {
					vs[x].Accuracy = c.ModelAccuracy(vs[x].Model)
				}
			}
		}
	}
	for i := range c.Sessions {
		for j := range c.Sessions[i].Modules {
			m := &c.Sessions[i].Modules[j]
			if f, ok := m.FanOut.Normalized(); ok {
				m.FanOut = f
			}
		}
	}
	for i := range c.Profiles {
		for j := range c.Profiles[i].Entries {
			if c.Profiles[i].Entries[j].Concurrency == 0 {
				c.Profiles[i].Entries[j].Concurrency = 1
			}
		}
	}
}

func tooMany() *ConfigError {
	return &ConfigError{Msg: fmt.Sprintf("too many problems: only the first %d are shown", maxErrors)}
}

func joinErrors(errs []*ConfigError) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 {
		return errs[0]
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

// Limits that keep a hostile document from making Load slow or overflow.
const (
	maxNodes       = 1 << 20   // list items and fields visited per Load, aliases expanded
	maxBatch       = 1_000_000 // profile batch size
	maxConcurrency = 1_000_000 // profile concurrency
	maxErrors      = 200       // problems reported per Load; the rest are summarised
)

// Allowed keys, in the order they are listed in errors.
var (
	topKeys      = []string{"hardware", "profiles", "sessions", "backends", "membership"}
	hardwareKeys = []string{"name", "price", "link_latency", "link_mbps"}
	profileKeys  = []string{"model", "hardware", "accuracy", "input_bytes", "output_bytes", "entries"}
	entryKeys    = []string{"batch", "concurrency", "duration"}
	sessionKeys  = []string{"name", "slo", "accuracy", "modules", "joint_accuracy"}
	jointKeys    = []string{"variants", "accuracy"}
	moduleKeys   = []string{"name", "model", "variants", "rate", "after", "join", "race", "tail", "fanout"}
	variantKeys  = []string{"model", "accuracy"}
	backendKeys  = []string{"id", "address", "hardware", "tls"}
)

// Sections of a Config, for fieldKey.
const (
	secHardware   = "hardware"
	secProfile    = "profiles"
	secEntry      = "entries"
	secSession    = "sessions"
	secModule     = "modules"
	secVariant    = "variants"
	secJoint      = "joint_accuracy"
	secBackend    = "backends"
	secMembership = "membership"
)

// fieldKey names one field of one item of the merged Config: i is the item's
// index in its Config slice, j the entry or module index within it (-1 for
// top-level items), v the variant index within a module (0 elsewhere), field
// the YAML key ("price", "after[2]").
type fieldKey struct {
	sec   string
	i, j  int
	v     int
	field string
}

// fieldInfo is where the parser found a field, and whether it already reported
// the field as malformed (so the validator does not report it again).
type fieldInfo struct {
	file string
	line int
	bad  bool
}

// parser turns YAML nodes into Config items, recording where every field was.
type parser struct {
	cfg    *Config
	fields map[fieldKey]fieldInfo
	errs   []*ConfigError
	name   string // current file
	budget int    // nodes left to visit
	over   bool   // budget exhausted and reported
	full   bool   // maxErrors reached

	membershipAt Source
}

func (p *parser) errorf(line int, field, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		p.full = true
		return
	}
	p.errs = append(p.errs, &ConfigError{File: p.name, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// spend takes n from the visit budget, reporting once when it runs out.
func (p *parser) spend(line int) bool {
	if p.budget <= 0 {
		if !p.over {
			p.over = true
			p.errorf(line, "", "document expands to more than %d items (through aliases?): refusing to read further", maxNodes)
		}
		return false
	}
	p.budget--
	return true
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// file parses every YAML document of d.
func (p *parser) file(d NamedDoc) {
	p.name = d.Name
	dec := yaml.NewDecoder(bytes.NewReader(d.Data))
	content := false
	for {
		var doc yaml.Node
		err := decodeNode(dec, &doc)
		if err == io.EOF {
			break
		}
		if err != nil {
			msg := err.Error()
			line := 0
			if m := yamlLine.FindStringSubmatch(msg); m != nil {
				line, _ = strconv.Atoi(m[1])
				msg = m[2]
			} else {
				msg = strings.TrimPrefix(msg, "yaml: ")
			}
			p.errorf(line, "", "YAML syntax error: %s", msg)
			return
		}
		if p.document(&doc) {
			content = true
		}
	}
	if !content {
		p.errorf(0, "", "file holds no config: want a mapping with the keys %s", strings.Join(topKeys, ", "))
	}
}

// decodeNode reads the next YAML document, turning a panic of the YAML library
// into an error: no input may take the process down.
func decodeNode(dec *yaml.Decoder, doc *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: YAML parser failed: %v", r)
		}
	}()
	return dec.Decode(doc)
}

// document parses one YAML document; it reports whether the document had content.
func (p *parser) document(doc *yaml.Node) bool {
	root := doc
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return false
		}
		root = doc.Content[0]
	}
	root = resolve(root)
	if isNull(root) {
		return false
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root.Line, "", "want a mapping with the keys %s; got %s", strings.Join(topKeys, ", "), describe(root))
		return true
	}
	kv := p.pairs(root)
	p.checkKeys(kv, "", topKeys)
	done := make(map[string]bool, len(kv))
	for _, f := range kv {
		if !p.spend(f.key.Line) {
			return true
		}
		if done[f.name] {
			continue // reported by checkKeys
		}
		done[f.name] = true
		switch f.name {
		case "hardware":
			p.list(f.val, "hardware", "a list of hardware types such as [{name: v100, price: 3.06}]", p.hardware)
		case "profiles":
			p.list(f.val, "profiles", "a list of profiles such as [{model: resnet50, hardware: v100, entries: [...]}]", p.profile)
		case "sessions":
			p.list(f.val, "sessions", "a list of sessions such as [{name: traffic, slo: 400ms, modules: [...]}]", p.session)
		case "backends":
			p.list(f.val, "backends", "a list of backends such as [{id: gpu-0, address: 127.0.0.1:9101, hardware: v100}]", p.backend)
		case "membership":
			p.membership(f.val)
		}
	}
	return true
}

// pair is one key of a mapping and its value, aliases resolved.
type pair struct {
	name string // "" when the key is not a scalar
	key  *yaml.Node
	val  *yaml.Node
}

type pairs []pair

func (kv pairs) get(name string) *yaml.Node {
	for _, f := range kv {
		if f.name == name {
			return f.val
		}
	}
	return nil
}

// pairs returns the keys of mapping n in order; non-scalar keys get name "".
func (p *parser) pairs(n *yaml.Node) pairs {
	kv := make(pairs, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k == nil || v == nil {
			continue
		}
		f := pair{key: k, val: v}
		if k.Kind == yaml.ScalarNode {
			f.name = k.Value
		}
		kv = append(kv, f)
	}
	return kv
}

// checkKeys reports keys of kv that are not allowed or repeated.
func (p *parser) checkKeys(kv pairs, path string, allowed []string) {
	first := make(map[string]int, len(kv))
	for _, f := range kv {
		switch {
		case f.key.Kind != yaml.ScalarNode:
			p.errorf(f.key.Line, path, "a key must be a plain name, got %s: allowed keys are %s", describe(f.key), strings.Join(allowed, ", "))
		case f.name == "<<":
			p.errorf(f.key.Line, path, "merge keys (<<) are not supported: write the keys out; allowed keys are %s", strings.Join(allowed, ", "))
		case !containsString(allowed, f.name):
			hint := ""
			if s := closest(f.name, allowed); s != "" {
				hint = fmt.Sprintf(" (did you mean %s?)", s)
			}
			p.errorf(f.key.Line, path, "unknown key %q%s: allowed keys are %s", f.name, hint, strings.Join(allowed, ", "))
		default:
			if line, dup := first[f.name]; dup {
				p.errorf(f.key.Line, path, "key %q repeated (first at line %d): give each key once", f.name, line)
			} else {
				first[f.name] = f.key.Line
			}
		}
	}
}

// list calls item for every element of the sequence n; null means empty.
func (p *parser) list(n *yaml.Node, path, want string, item func(*yaml.Node)) {
	if isNull(n) {
		return
	}
	if err := p.items(n, want, func(_ int, c *yaml.Node) { item(c) }); err != nil {
		p.errorf(n.Line, path, "%s", err.Error())
	}
}

// items calls item for every element of the sequence n with its index, up to
// the parser's budget (spend), and returns "want <want>; got ..." when n is
// not a sequence: the loop of every list in a config, top-level (list) or a
// field (p.field's decoder).
func (p *parser) items(n *yaml.Node, want string, item func(i int, c *yaml.Node)) error {
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("want %s; got %s", want, describe(n))
	}
	for i, c := range n.Content {
		c = resolve(c)
		if c == nil || !p.spend(c.Line) {
			break
		}
		item(i, c)
	}
	return nil
}

// mapping checks that n is a mapping describing want; path names it in errors.
func (p *parser) mapping(n *yaml.Node, path, want string) (pairs, bool) {
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, path, "want %s; got %s", want, describe(n))
		return nil, false
	}
	return p.pairs(n), true
}

// itemName returns the value of key name when it is a plain scalar, for labels.
func itemName(kv pairs, name string) string {
	if v := kv.get(name); v != nil && v.Kind == yaml.ScalarNode && !isNull(v) {
		return v.Value
	}
	return ""
}

// field decodes the value of key name with dec. A missing or null value is
// reported when required; a malformed one is reported and marked bad so the
// validator stays quiet about it. k identifies the field, item is the item node.
func (p *parser) field(kv pairs, item *yaml.Node, k fieldKey, path string, required bool, want string, dec func(*yaml.Node) error) {
	fpath := path + "." + k.field
	var key, v *yaml.Node
	for _, f := range kv {
		if f.name == k.field {
			key, v = f.key, f.val
			break
		}
	}
	if v == nil || isNull(v) {
		line := item.Line
		if key != nil {
			line = key.Line
		}
		if required {
			p.errorf(line, fpath, "missing: want %s", want)
			p.fields[k] = fieldInfo{file: p.name, line: line, bad: true}
		} else {
			p.fields[k] = fieldInfo{file: p.name, line: line}
		}
		return
	}
	if !p.spend(v.Line) {
		return
	}
	// The key's line: for a block list or mapping the value starts on the next one.
	info := fieldInfo{file: p.name, line: key.Line}
	if err := dec(v); err != nil {
		p.errorf(key.Line, fpath, "%s", err.Error())
		info.bad = true
	}
	p.fields[k] = info
}

func (p *parser) hardware(n *yaml.Node) {
	i := len(p.cfg.Hardware)
	kv, ok := p.mapping(n, fmt.Sprintf("hardware[%d]", i), "a hardware type such as {name: v100, price: 3.06}")
	if !ok {
		return
	}
	h := Hardware{Source: Source{File: p.name, Line: n.Line}}
	path := label(secHardware, itemName(kv, "name"), i)
	p.checkKeys(kv, path, hardwareKeys)
	k := fieldKey{sec: secHardware, i: i, j: -1}
	p.field(kv, n, k.with("name"), path, true, "a hardware type name such as v100", decString(&h.Name))
	p.field(kv, n, k.with("price"), path, true, "a price in cost units per machine-hour such as 3.06", decFloat(&h.Price, "a price in cost units per machine-hour such as 3.06"))
	p.field(kv, n, k.with("link_latency"), path, false, "", decDuration(&h.LinkLatency))
	p.field(kv, n, k.with("link_mbps"), path, false, "", decFloat(&h.LinkMbps, "a bandwidth in Mbit/s such as 100"))
	p.cfg.Hardware = append(p.cfg.Hardware, h)
}

func (p *parser) profile(n *yaml.Node) {
	i := len(p.cfg.Profiles)
	kv, ok := p.mapping(n, fmt.Sprintf("profiles[%d]", i), "a profile such as {model: resnet50, hardware: v100, entries: [...]}")
	if !ok {
		return
	}
	pr := Profile{Source: Source{File: p.name, Line: n.Line}}
	path := profileLabel(itemName(kv, "model"), itemName(kv, "hardware"), i)
	p.checkKeys(kv, path, profileKeys)
	k := fieldKey{sec: secProfile, i: i, j: -1}
	p.field(kv, n, k.with("model"), path, true, "a model name such as resnet50", decString(&pr.Model))
	p.field(kv, n, k.with("hardware"), path, true, "a hardware type name such as v100", decString(&pr.Hardware))
	p.field(kv, n, k.with("accuracy"), path, false, "", decFloat(&pr.Accuracy, wantAccuracy))
	p.field(kv, n, k.with("input_bytes"), path, false, "", decInt(&pr.InputBytes, "the bytes one item sends, a whole number such as 602112"))
	p.field(kv, n, k.with("output_bytes"), path, false, "", decInt(&pr.OutputBytes, "the bytes one item receives, a whole number such as 4000"))
	p.field(kv, n, k.with("entries"), path, true, "a list of entries such as [{batch: 1, concurrency: 1, duration: 20ms}]", func(v *yaml.Node) error {
		return p.items(v, "a list of entries such as [{batch: 1, concurrency: 1, duration: 20ms}]", func(_ int, c *yaml.Node) {
			p.entry(&pr, c, i, path)
		})
	})
	p.cfg.Profiles = append(p.cfg.Profiles, pr)
}

func (p *parser) entry(pr *Profile, n *yaml.Node, i int, ppath string) {
	j := len(pr.Entries)
	path := fmt.Sprintf("%s.entries[%d]", ppath, j)
	kv, ok := p.mapping(n, path, "a profile entry such as {batch: 8, concurrency: 1, duration: 18ms}")
	if !ok {
		return
	}
	e := ProfileEntry{Source: Source{File: p.name, Line: n.Line}}
	p.checkKeys(kv, path, entryKeys)
	k := fieldKey{sec: secEntry, i: i, j: j}
	p.field(kv, n, k.with("batch"), path, true, "a batch size such as 8", decInt(&e.Batch, "a batch size (whole number ≥ 1) such as 8"))
	p.field(kv, n, k.with("concurrency"), path, false, "", decInt(&e.Concurrency, "a concurrency (whole number ≥ 1) such as 2"))
	p.field(kv, n, k.with("duration"), path, true, "a batch duration such as 18ms", decDuration(&e.Duration))
	pr.Entries = append(pr.Entries, e)
}

func (p *parser) session(n *yaml.Node) {
	i := len(p.cfg.Sessions)
	kv, ok := p.mapping(n, fmt.Sprintf("sessions[%d]", i), "a session such as {name: traffic, slo: 400ms, modules: [...]}")
	if !ok {
		return
	}
	s := Session{Source: Source{File: p.name, Line: n.Line}}
	path := label(secSession, itemName(kv, "name"), i)
	p.checkKeys(kv, path, sessionKeys)
	k := fieldKey{sec: secSession, i: i, j: -1}
	p.field(kv, n, k.with("name"), path, true, "a session name such as traffic", decString(&s.Name))
	p.field(kv, n, k.with("slo"), path, true, "an end-to-end latency objective such as 400ms", decDuration(&s.SLO))
	p.field(kv, n, k.with("accuracy"), path, false, "", func(v *yaml.Node) error {
		var a float64
		if err := decFloat(&a, "an end-to-end accuracy target from 0 to 1 such as 0.95")(v); err != nil {
			return err
		}
		s.Accuracy = &a
		return nil
	})
	p.field(kv, n, k.with("modules"), path, true, "a list of modules such as [{name: detect, model: ssd, rate: 100}]", func(v *yaml.Node) error {
		return p.items(v, "a list of modules such as [{name: detect, model: ssd, rate: 100}]", func(_ int, c *yaml.Node) {
			p.module(&s, c, i, path)
		})
	})
	p.field(kv, n, k.with("joint_accuracy"), path, false, "", func(v *yaml.Node) error {
		return p.items(v, wantJoint, func(_ int, c *yaml.Node) {
			p.joint(&s, c, i, path)
		})
	})
	p.cfg.Sessions = append(p.cfg.Sessions, s)
}

const wantJoint = "a list of measured combinations such as [{variants: {det: det-small, rec: rec-small}, accuracy: 0.59}]"

// joint parses one entry of a session's joint_accuracy list.
func (p *parser) joint(s *Session, n *yaml.Node, i int, spath string) {
	x := len(s.JointAccuracy)
	path := fmt.Sprintf("%s.joint_accuracy[%d]", spath, x)
	kv, ok := p.mapping(n, path, "a measured combination such as {variants: {det: det-small, rec: rec-small}, accuracy: 0.59}")
	if !ok {
		return
	}
	ja := JointAccuracy{Source: Source{File: p.name, Line: n.Line}}
	p.checkKeys(kv, path, jointKeys)
	k := fieldKey{sec: secJoint, i: i, j: x}
	p.field(kv, n, k.with("variants"), path, true, "a map from each module with variants to the variant run, such as {det: det-small, rec: rec-small}", func(v *yaml.Node) error {
		if v.Kind != yaml.MappingNode {
			return fmt.Errorf("want a map from each module with variants to the variant run, such as {det: det-small, rec: rec-small}; got %s", describe(v))
		}
		ja.Variants = make(map[string]string, len(v.Content)/2)
		for c := 0; c+1 < len(v.Content); c += 2 {
			mod, model := v.Content[c], resolve(v.Content[c+1])
			if model == nil || model.Kind != yaml.ScalarNode || isNull(model) {
				return fmt.Errorf("module %s: want a variant's model name; got %s", mod.Value, describe(v.Content[c+1]))
			}
			if _, dup := ja.Variants[mod.Value]; dup {
				return fmt.Errorf("module %s is named twice: name each module once", mod.Value)
			}
			ja.Variants[mod.Value] = model.Value
		}
		return nil
	})
	p.field(kv, n, k.with("accuracy"), path, true, wantAccuracy, decFloat(&ja.Accuracy, wantAccuracy))
	s.JointAccuracy = append(s.JointAccuracy, ja)
}

func (p *parser) module(s *Session, n *yaml.Node, i int, spath string) {
	j := len(s.Modules)
	kv, ok := p.mapping(n, fmt.Sprintf("%s.modules[%d]", spath, j), "a module such as {name: car, model: resnet50, rate: 60, after: [detect]}")
	if !ok {
		return
	}
	m := Module{Source: Source{File: p.name, Line: n.Line}}
	path := spath + "." + label(secModule, itemName(kv, "name"), j)
	p.checkKeys(kv, path, moduleKeys)
	k := fieldKey{sec: secModule, i: i, j: j}
	p.field(kv, n, k.with("name"), path, true, "a module name such as detect", decString(&m.Name))
	p.field(kv, n, k.with("model"), path, false, "", decString(&m.Model))
	p.field(kv, n, k.with("variants"), path, false, "", func(v *yaml.Node) error {
		return p.items(v, wantVariants, func(_ int, c *yaml.Node) {
			p.variant(&m, c, i, j, path)
		})
	})
	p.field(kv, n, k.with("rate"), path, false, "", decFloat(&m.Rate, "a request rate in req/s such as 60"))
	p.field(kv, n, k.with("after"), path, false, "", func(v *yaml.Node) error {
		return p.items(v, "a list of module names such as [detect]", func(a int, c *yaml.Node) {
			ak := k.with(fmt.Sprintf("after[%d]", len(m.After)))
			var name string
			if err := decString(&name)(c); err != nil {
				p.errorf(c.Line, fmt.Sprintf("%s.after[%d]", path, a), "want a module name; got %s", describe(c))
				return
			}
			p.fields[ak] = fieldInfo{file: p.name, line: c.Line}
			m.After = append(m.After, name)
		})
	})
	p.field(kv, n, k.with("join"), path, false, "", decString(&m.Join))
	p.field(kv, n, k.with("race"), path, false, "", m.Race.UnmarshalYAML)
	p.field(kv, n, k.with("tail"), path, false, "", func(v *yaml.Node) error {
		var t Tail
		if err := t.UnmarshalYAML(v); err != nil {
			return err
		}
		m.Tail = &t
		return nil
	})
	p.field(kv, n, k.with("fanout"), path, false, "", m.FanOut.UnmarshalYAML)
	s.Modules = append(s.Modules, m)
}

const (
	wantAccuracy = "an accuracy from 0 to 1 such as 0.95"
	wantVariants = "a list of variants such as [{model: resnet50, accuracy: 0.76}, {model: resnet18, accuracy: 0.70}]"
)

func (p *parser) variant(m *Module, n *yaml.Node, i, j int, mpath string) {
	x := len(m.Variants)
	path := fmt.Sprintf("%s.variants[%d]", mpath, x)
	kv, ok := p.mapping(n, path, "a variant such as {model: resnet18, accuracy: 0.70}")
	if !ok {
		return
	}
	va := Variant{Source: Source{File: p.name, Line: n.Line}}
	p.checkKeys(kv, path, variantKeys)
	k := fieldKey{sec: secVariant, i: i, j: j, v: x}
	p.field(kv, n, k.with("model"), path, true, "a model name such as resnet18", decString(&va.Model))
	p.field(kv, n, k.with("accuracy"), path, false, "", decFloat(&va.Accuracy, wantAccuracy))
	m.Variants = append(m.Variants, va)
}

func (p *parser) backend(n *yaml.Node) {
	i := len(p.cfg.Backends)
	kv, ok := p.mapping(n, fmt.Sprintf("backends[%d]", i), "a backend such as {id: gpu-0, address: 127.0.0.1:9101, hardware: v100}")
	if !ok {
		return
	}
	b := Backend{Source: Source{File: p.name, Line: n.Line}}
	path := label(secBackend, itemName(kv, "id"), i)
	p.checkKeys(kv, path, backendKeys)
	k := fieldKey{sec: secBackend, i: i, j: -1}
	p.field(kv, n, k.with("id"), path, true, "a backend id such as gpu-0", decString(&b.ID))
	p.field(kv, n, k.with("address"), path, true, "a host:port address such as 127.0.0.1:9101", decString(&b.Address))
	p.field(kv, n, k.with("hardware"), path, true, "a hardware type name such as v100", decString(&b.Hardware))
	p.field(kv, n, k.with("tls"), path, false, "", decBool(&b.TLS))
	p.cfg.Backends = append(p.cfg.Backends, b)
}

func (p *parser) membership(n *yaml.Node) {
	if isNull(n) {
		return
	}
	var v string
	if err := decString(&v)(n); err != nil {
		p.errorf(n.Line, "membership", "want static or consul; got %s", describe(n))
		p.fields[fieldKey{sec: secMembership, j: -1}] = fieldInfo{file: p.name, line: n.Line, bad: true}
		return
	}
	here := Source{File: p.name, Line: n.Line}
	if prev := p.membershipAt; prev.File != "" {
		if v != p.cfg.Membership {
			p.errorf(n.Line, "membership", "set to %q at %s and to %q at %s: set it once", p.cfg.Membership, prev, v, here)
		}
		return
	}
	p.membershipAt = here
	p.cfg.Membership = v
	p.fields[fieldKey{sec: secMembership, j: -1}] = fieldInfo{file: p.name, line: n.Line}
}

func (k fieldKey) with(field string) fieldKey {
	k.field = field
	return k
}

// Decoders: each returns an error whose text says what was wanted and what was found.

func decString(dst *string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind != yaml.ScalarNode {
			return fmt.Errorf("want a name; got %s", describe(n))
		}
		*dst = n.Value
		return nil
	}
}

func decBool(dst *bool) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
			return n.Decode(dst)
		}
		return fmt.Errorf("want true or false; got %s", describe(n))
	}
}

func decFloat(dst *float64, want string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind == yaml.ScalarNode {
			if t := n.ShortTag(); t == "!!int" || t == "!!float" {
				var f float64
				if err := n.Decode(&f); err == nil {
					*dst = f
					return nil
				}
			}
		}
		return fmt.Errorf("want %s; got %s", want, describe(n))
	}
}

func decInt(dst *int, want string) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
			var i int
			if err := n.Decode(&i); err == nil {
				*dst = i
				return nil
			}
		}
		return fmt.Errorf("want %s; got %s", want, describe(n))
	}
}

func decDuration(dst *Duration) func(*yaml.Node) error {
	return func(n *yaml.Node) error {
		return dst.UnmarshalYAML(n)
	}
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > 100 {
			return nil
		}
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// describe names what n is, for "want X; got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return strconv.Quote(v)
	}
	return "an unsupported YAML node"
}

// label names an item in a field path: sec[name], or sec[index] when it has no name.
func label(sec, name string, i int) string {
	if name == "" {
		return fmt.Sprintf("%s[%d]", sec, i)
	}
	if strings.IndexFunc(name, func(r rune) bool { return strings.ContainsRune("[]\". ", r) || !strconv.IsPrint(r) }) >= 0 {
		return sec + "[" + strconv.Quote(name) + "]"
	}
	return sec + "[" + name + "]"
}

func profileLabel(model, hw string, i int) string {
	if model == "" || hw == "" {
		return label(secProfile, "", i)
	}
	return label(secProfile, model+"/"+hw, i)
}

func known(names map[string]int, name string) bool {
	_, ok := names[name]
	return ok
}

func containsString(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// closest returns the allowed key within edit distance 2 of key, if any.
func closest(key string, allowed []string) string {
	best, bestD := "", 3
	for _, a := range allowed {
		if d := editDistance(strings.ToLower(key), a); d < bestD {
			best, bestD = a, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// validSessionName matches what may appear as a model name in a URL path segment.
var validSessionName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// validator checks a merged Config in time near-linear in its size. fields, when
// set by the parser, gives the line of each field and which fields were already
// reported as malformed.
type validator struct {
	c      *Config
	fields map[fieldKey]fieldInfo
	errs   []*ConfigError
	full   bool // maxErrors reached

	hw       map[string]bool          // defined hardware names
	hwList   string                   // the same, for messages
	fastest  map[string]time.Duration // smallest positive profiled duration of each profiled model (0: none)
	profiled string                   // profiled model names, for messages
}

// fail reports a problem with field k of the item at src, path naming the field.
func (v *validator) fail(k fieldKey, src Source, path, format string, args ...any) {
	file, line := src.File, src.Line
	if f, ok := v.fields[k]; ok {
		if f.bad {
			return
		}
		file, line = f.file, f.line
	}
	if len(v.errs) >= maxErrors {
		v.full = true
		return
	}
	v.errs = append(v.errs, &ConfigError{File: file, Line: line, Field: path, Msg: fmt.Sprintf(format, args...)})
}

// at names where an item was defined: its Source, or its path for a Config built in Go.
func at(src Source, path string) string {
	if src.File == "" {
		return path
	}
	return src.String()
}

// nameList joins names for a message, showing at most 10.
func nameList(names []string, none string) string {
	const show = 10
	switch {
	case len(names) == 0:
		return none
	case len(names) > show:
		return fmt.Sprintf("%s and %d more", strings.Join(names[:show], ", "), len(names)-show)
	}
	return strings.Join(names, ", ")
}

func (v *validator) run() {
	v.index()
	v.hardware()
	v.profiles()
	v.sessions()
	v.backends()
	v.membership()
}

// index builds the lookup tables the checks share.
func (v *validator) index() {
	v.hw = make(map[string]bool, len(v.c.Hardware))
	var hw []string
	for _, h := range v.c.Hardware {
		if h.Name != "" && !v.hw[h.Name] {
			v.hw[h.Name] = true
			hw = append(hw, h.Name)
		}
	}
	v.hwList = nameList(hw, "none: define it under hardware, such as {name: v100, price: 3.06}")
	v.fastest = make(map[string]time.Duration, len(v.c.Profiles))
	var models []string
	for _, p := range v.c.Profiles {
		if p.Model == "" {
			continue
		}
		best, seen := v.fastest[p.Model]
		if !seen {
			models = append(models, p.Model)
		}
		for _, e := range p.Entries {
			if d := e.Duration.D(); d > 0 && (best == 0 || d < best) {
				best = d
			}
		}
		v.fastest[p.Model] = best
	}
	v.profiled = nameList(models, "none")
}

func (v *validator) hardware() {
	seen := make(map[string]int, len(v.c.Hardware))
	for i, h := range v.c.Hardware {
		path := label(secHardware, h.Name, i)
		k := fieldKey{sec: secHardware, i: i, j: -1}
		if h.Name == "" {
			v.fail(k.with("name"), h.Source, path+".name", "must not be empty: want a hardware type name such as v100")
		} else if j, dup := seen[h.Name]; dup {
			prev := v.c.Hardware[j]
			v.fail(k.with("name"), h.Source, path+".name", "hardware %s defined at %s and %s: hardware names must be unique",
				h.Name, at(prev.Source, label(secHardware, "", j)), at(h.Source, label(secHardware, "", i)))
		} else {
			seen[h.Name] = i
		}
		if !(h.Price > 0) || math.IsInf(h.Price, 0) {
			v.fail(k.with("price"), h.Source, path+".price", "must be a positive finite number (cost units per machine-hour), got %v", h.Price)
		}
		if h.LinkLatency < 0 || time.Duration(h.LinkLatency) > MaxLinkLatency {
			v.fail(k.with("link_latency"), h.Source, path+".link_latency", "must be from 0 to %v (the one-way latency between the gateway and a backend), got %v", MaxLinkLatency, time.Duration(h.LinkLatency))
		}
		if math.IsNaN(h.LinkMbps) || math.IsInf(h.LinkMbps, 0) || h.LinkMbps < 0 {
			v.fail(k.with("link_mbps"), h.Source, path+".link_mbps", "must be a finite number of Mbit/s ≥ 0 (0: not counted), got %v", h.LinkMbps)
		}
	}
}

func (v *validator) checkHardwareRef(k fieldKey, src Source, path, hw string) {
	if hw == "" {
		v.fail(k, src, path, "must not be empty: want a hardware type name; defined hardware: %s", v.hwList)
		return
	}
	if !v.hw[hw] {
		v.fail(k, src, path, "hardware %q is not defined; defined hardware: %s", hw, v.hwList)
	}
}

func (v *validator) profiles() {
	type pair struct{ model, hw string }
	type bc struct{ b, c int }
	seen := make(map[pair]int, len(v.c.Profiles))
	for i, p := range v.c.Profiles {
		path := profileLabel(p.Model, p.Hardware, i)
		k := fieldKey{sec: secProfile, i: i, j: -1}
		if p.Model == "" {
			v.fail(k.with("model"), p.Source, path+".model", "must not be empty: want the model name, such as resnet50")
		}
		v.checkHardwareRef(k.with("hardware"), p.Source, path+".hardware", p.Hardware)
		if p.Model != "" && p.Hardware != "" {
			key := pair{p.Model, p.Hardware}
			if j, dup := seen[key]; dup {
				prev := v.c.Profiles[j]
				v.fail(k, p.Source, path, "profile of model %s on hardware %s defined at %s and %s: give each (model, hardware) one profile with all its entries",
					p.Model, p.Hardware, at(prev.Source, label(secProfile, "", j)), at(p.Source, label(secProfile, "", i)))
			} else {
				seen[key] = i
			}
		}
		if math.IsNaN(p.Accuracy) || p.Accuracy < 0 || p.Accuracy > 1 {
			v.fail(k.with("accuracy"), p.Source, path+".accuracy", "must be from 0 to 1 (the share of right outputs on the labelled set), got %v", p.Accuracy)
		}
		for _, f := range []struct {
			key string
			v   int
		}{{"input_bytes", p.InputBytes}, {"output_bytes", p.OutputBytes}} {
			if f.v < 0 || f.v > MaxItemBytes {
				v.fail(k.with(f.key), p.Source, path+"."+f.key, "must be a whole number of bytes from 0 to %d, got %d", MaxItemBytes, f.v)
			}
		}
		if len(p.Entries) == 0 {
			v.fail(k.with("entries"), p.Source, path+".entries", "must list at least one entry, such as {batch: 1, concurrency: 1, duration: 20ms}")
		}
		entries := make(map[bc]int, len(p.Entries))
		for j, e := range p.Entries {
			epath := fmt.Sprintf("%s.entries[%d]", path, j)
			ek := fieldKey{sec: secEntry, i: i, j: j}
			if e.Batch < 1 || e.Batch > maxBatch {
				v.fail(ek.with("batch"), e.Source, epath+".batch", "must be a whole number from 1 to %d, got %d", maxBatch, e.Batch)
			}
			if e.Concurrency < 0 || e.Concurrency > maxConcurrency {
				v.fail(ek.with("concurrency"), e.Source, epath+".concurrency", "must be a whole number from 1 to %d (0 or missing means 1), got %d", maxConcurrency, e.Concurrency)
			}
			if e.Duration <= 0 {
				v.fail(ek.with("duration"), e.Source, epath+".duration", "must be a positive duration such as 18ms, got %s", e.Duration.D())
			}
			c := max(e.Concurrency, 1)
			if j0, dup := entries[bc{e.Batch, c}]; dup {
				v.fail(ek, e.Source, epath, "batch %d with concurrency %d is listed twice (entries[%d] at %s): give each (batch, concurrency) once",
					e.Batch, c, j0, at(p.Entries[j0].Source, fmt.Sprintf("%s.entries[%d]", path, j0)))
			} else {
				entries[bc{e.Batch, c}] = j
			}
		}
	}
}

func (v *validator) sessions() {
	seen := make(map[string]int, len(v.c.Sessions))
	for i := range v.c.Sessions {
		s := &v.c.Sessions[i]
		path := label(secSession, s.Name, i)
		k := fieldKey{sec: secSession, i: i, j: -1}
		switch {
		case s.Name == "":
			v.fail(k.with("name"), s.Source, path+".name", "must not be empty: want a session name such as traffic")
		case !validSessionName.MatchString(s.Name) || s.Name == "." || s.Name == "..":
			v.fail(k.with("name"), s.Source, path+".name", "%q is not allowed: a session is exposed as a model name in URLs, so use only letters, digits, '-', '_' and '.' (and not . or ..)", s.Name)
		}
		if s.Name != "" {
			if j, dup := seen[s.Name]; dup {
				prev := v.c.Sessions[j]
				v.fail(k.with("name"), s.Source, path+".name", "session %s defined at %s and %s: session names must be unique",
					s.Name, at(prev.Source, label(secSession, "", j)), at(s.Source, label(secSession, "", i)))
			} else {
				seen[s.Name] = i
			}
		}
		if s.SLO <= 0 {
			v.fail(k.with("slo"), s.Source, path+".slo", "must be a positive duration such as 400ms, got %s", s.SLO.D())
		}
		if a := s.Accuracy; a != nil && !(*a >= 0 && *a <= 1) {
			v.fail(k.with("accuracy"), s.Source, path+".accuracy", "must be an accuracy target from 0 to 1 such as 0.95 (leave it out for the most accurate variants), got %v", *a)
		}
		if len(s.Modules) == 0 {
			v.fail(k.with("modules"), s.Source, path+".modules", "must list at least one module, such as {name: detect, model: ssd, rate: 100}")
			continue
		}
		if v.modules(s, i, path) {
			v.dag(s, i, path)
		}
		v.joints(s, i, path)
	}
}

// modules checks the modules of session s (index i); it reports whether the DAG
// checks (cycles, fastest latency) make sense: no module runs after itself.
func (v *validator) modules(s *Session, i int, spath string) bool {
	dagOK := true
	names := make(map[string]int, len(s.Modules))
	var all []string
	for j, m := range s.Modules {
		k := fieldKey{sec: secModule, i: i, j: j}
		path := spath + "." + label(secModule, m.Name, j)
		if m.Name == "" {
			v.fail(k.with("name"), m.Source, path+".name", "must not be empty: want a module name such as detect")
			continue
		}
		if j0, dup := names[m.Name]; dup {
			v.fail(k.with("name"), m.Source, path+".name", "module %s defined at %s and %s: module names must be unique within a session",
				m.Name, at(s.Modules[j0].Source, fmt.Sprintf("%s.modules[%d]", spath, j0)), at(m.Source, fmt.Sprintf("%s.modules[%d]", spath, j)))
			continue
		}
		names[m.Name] = j
		all = append(all, m.Name)
	}
	moduleList := nameList(all, "none")
	for j, m := range s.Modules {
		k := fieldKey{sec: secModule, i: i, j: j}
		path := spath + "." + label(secModule, m.Name, j)
		switch {
		case m.Model != "" && len(m.Variants) > 0:
			v.fail(k.with("variants"), m.Source, path+".variants", "module %s gives both model and variants: give model (one model) or variants (several, the planner picks one), not both", m.Name)
		case len(m.Variants) > 0:
			v.variants(m, i, j, path)
		case m.Model == "" && v.fields[k.with("variants")].bad:
			// The variants field was malformed: reported by the parser.
		case m.Model == "":
			v.fail(k.with("model"), m.Source, path+".model", "missing: want a model name, or variants such as [{model: resnet18, accuracy: 0.70}]; profiled models: %s", v.profiled)
		default:
			if _, ok := v.fastest[m.Model]; !ok {
				v.fail(k.with("model"), m.Source, path+".model", "model %q has no profile: add one under profiles (profiled models: %s)", m.Model, v.profiled)
			}
		}
		if !(m.Rate >= 0) || math.IsInf(m.Rate, 0) {
			v.fail(k.with("rate"), m.Source, path+".rate", "must be a finite number ≥ 0 (req/s), got %v", m.Rate)
		}
		listed := make(map[string]bool, len(m.After))
		for a, name := range m.After {
			ak := k.with("after[" + strconv.Itoa(a) + "]")
			apath := path + ".after[" + strconv.Itoa(a) + "]"
			switch {
			case name == m.Name:
				v.fail(ak, m.Source, apath, "module %s cannot run after itself", m.Name)
				dagOK = false
			case !known(names, name):
				v.fail(ak, m.Source, apath, "%q is not a module of session %s; its modules are %s", name, s.Name, moduleList)
			case listed[name]:
				v.fail(ak, m.Source, apath, "%q is listed twice: name each module once", name)
			}
			listed[name] = true
		}
		switch {
		case m.Join != "" && m.Join != JoinAllOf && m.Join != JoinAnyOf:
			v.fail(k.with("join"), m.Source, path+".join", "%q is not a join; allowed: allof (the default: run once every parent has finished) or anyof (run on the first parent to finish, cancel the others)", m.Join)
		case m.AnyOf() && len(m.After) < 2:
			v.fail(k.with("join"), m.Source, path+".join", "anyof races the modules in after, so module %s needs at least two of them; it has %d", m.Name, len(m.After))
		case m.AnyOf():
			v.anyOfParents(s, m, k, path)
		}
		if (m.Race < 0 && m.Race != RaceAuto) || m.Race > MaxRace {
			v.fail(k.with("race"), m.Source, path+".race", "must be the number of machines each batch runs on at once, 1 ≤ race ≤ %d (1 or none: no race), or auto (the planner chooses from the module's tail); got %d", MaxRace, m.Race)
		}
		if m.Tail != nil {
			v.tail(m, k.with("tail"), path+".tail")
		}
		if len(m.FanOut) > 0 {
			v.fanOut(s, m, k.with("fanout"), path+".fanout")
		}
	}
	return dagOK
}

// fanOut checks module m's fan-out distribution: well formed, on a module
// with one parent, and agreeing with the rates (m's rate is its parent's
// times the distribution's mean, within 1%).
func (v *validator) fanOut(s *Session, m Module, k fieldKey, path string) {
	f, ok := m.FanOut.Normalized()
	if !ok {
		v.fail(k, m.Source, path, "want %s: every key a whole number from 0 to %d listed once, every weight finite and ≥ 0, and some weight > 0", wantFanOut, MaxFanOutItems)
		return
	}
	if len(m.After) != 1 {
		v.fail(k, m.Source, path, "module %s fans out per item of its parent, so it needs exactly one module in after; it has %d", m.Name, len(m.After))
		return
	}
	pi := s.ModuleIndex(m.After[0])
	if pi < 0 {
		return // reported with after
	}
	pr := s.Modules[pi].Rate
	want := pr * f.Mean()
	if math.Abs(m.Rate-want) > 0.01*math.Max(m.Rate, want)+1e-9 {
		v.fail(k, m.Source, path, "averages %.4g items per item of %s, so at %s's rate of %g req/s module %s runs %.4g items/s, but its rate is %g: set rate: %.4g (or correct fanout)",
			f.Mean(), m.After[0], m.After[0], pr, m.Name, want, m.Rate, want)
	}
}

// tail checks module m's measured tail: share in [0, MaxTailShare], factor in
// [1, MaxTailFactor], both finite.
func (v *validator) tail(m Module, k fieldKey, path string) {
	t := m.Tail
	if !(t.Share >= 0 && t.Share <= MaxTailShare) {
		v.fail(k, m.Source, path+".share", "must be the share of module %s's batches that are slow, 0 ≤ share ≤ %g; got %v", m.Name, float64(MaxTailShare), t.Share)
	}
	if !(t.Factor >= 1 && t.Factor <= MaxTailFactor) {
		v.fail(k, m.Source, path+".factor", "must be how many times its profiled duration a slow batch of module %s takes, 1 ≤ factor ≤ %g; got %v", m.Name, float64(MaxTailFactor), t.Factor)
	}
}

// anyOfParents checks that every parent of anyof module m feeds m alone: the
// losers' work is cancelled once a parent finishes, so no other module may
// wait on it.
func (v *validator) anyOfParents(s *Session, m Module, k fieldKey, path string) {
	for _, p := range m.After {
		for _, o := range s.Modules {
			if o.Name == m.Name || !containsString(o.After, p) {
				continue
			}
			v.fail(k.with("join"), m.Source, path+".join", "module %s races its parents (anyof), so each must feed it alone, but %s also feeds %s: the loser's work is cancelled; give %s its own copy of %s",
				m.Name, p, o.Name, o.Name, p)
			return
		}
	}
}

// variants checks the variants of module m (module j of session i).
func (v *validator) variants(m Module, i, j int, mpath string) {
	seen := make(map[string]int, len(m.Variants))
	for x, va := range m.Variants {
		k := fieldKey{sec: secVariant, i: i, j: j, v: x}
		path := fmt.Sprintf("%s.variants[%d]", mpath, x)
		if va.Model == "" {
			v.fail(k.with("model"), va.Source, path+".model", "must not be empty: want a model name; profiled models: %s", v.profiled)
			continue
		}
		if x0, dup := seen[va.Model]; dup {
			v.fail(k.with("model"), va.Source, path+".model", "variant %s is listed twice (variants[%d] at %s): list each model once", va.Model, x0, at(m.Variants[x0].Source, fmt.Sprintf("%s.variants[%d]", mpath, x0)))
			continue
		}
		seen[va.Model] = x
		if _, ok := v.fastest[va.Model]; !ok {
			v.fail(k.with("model"), va.Source, path+".model", "variant %q has no profile on any hardware: add one under profiles (profiled models: %s)", va.Model, v.profiled)
		}
		switch {
		case math.IsNaN(va.Accuracy) || va.Accuracy < 0 || va.Accuracy > 1:
			v.fail(k.with("accuracy"), va.Source, path+".accuracy", "must be from 0 to 1 (the share of right outputs), got %v", va.Accuracy)
		case va.Accuracy == 0 && v.c.ModelAccuracy(va.Model) == 0:
			v.fail(k.with("accuracy"), va.Source, path+".accuracy", "missing: give the variant's accuracy from 0 to 1 such as 0.95, or measure it into its profile with piccolo profile --accuracy")
		}
	}
}

// joints checks session s's joint_accuracy entries: each names every module
// with variants, and only those, with one of its variants; each accuracy is
// in [0, 1]; no combination is listed twice.
func (v *validator) joints(s *Session, i int, spath string) {
	var withVariants []string
	models := map[string][]string{}
	for _, m := range s.Modules {
		if len(m.Variants) > 0 {
			withVariants = append(withVariants, m.Name)
			for _, va := range m.Variants {
				models[m.Name] = append(models[m.Name], va.Model)
			}
		}
	}
	seen := map[string]int{}
	for x, ja := range s.JointAccuracy {
		k := fieldKey{sec: secJoint, i: i, j: x}
		path := fmt.Sprintf("%s.joint_accuracy[%d]", spath, x)
		if math.IsNaN(ja.Accuracy) || ja.Accuracy < 0 || ja.Accuracy > 1 {
			v.fail(k.with("accuracy"), ja.Source, path+".accuracy", "must be from 0 to 1 (the share of right outputs of the whole session), got %v", ja.Accuracy)
		}
		if len(withVariants) == 0 {
			v.fail(k.with("variants"), ja.Source, path+".variants", "session %s has no module with variants: joint accuracies are for variant combinations", s.Name)
			continue
		}
		ok := true
		for _, mod := range slices.Sorted(maps.Keys(ja.Variants)) {
			model := ja.Variants[mod]
			switch choices, has := models[mod]; {
			case !has:
				v.fail(k.with("variants"), ja.Source, path+".variants."+mod, "module %q is not a module of session %s with variants: name each of %s", mod, s.Name, strings.Join(withVariants, ", "))
				ok = false
			case !slices.Contains(choices, model):
				v.fail(k.with("variants"), ja.Source, path+".variants."+mod, "%q is not a variant of module %s: its variants are %s", model, mod, strings.Join(choices, ", "))
				ok = false
			}
		}
		for _, mod := range withVariants {
			if _, has := ja.Variants[mod]; !has {
				v.fail(k.with("variants"), ja.Source, path+".variants", "module %s is missing: a combination names the variant of every module with variants (%s)", mod, strings.Join(withVariants, ", "))
				ok = false
			}
		}
		if !ok {
			continue
		}
		key := JointKey(ja.Variants)
		if x0, dup := seen[key]; dup {
			v.fail(k.with("variants"), ja.Source, path+".variants", "combination listed twice (joint_accuracy[%d] at %s): list each once", x0, at(s.JointAccuracy[x0].Source, fmt.Sprintf("%s.joint_accuracy[%d]", spath, x0)))
			continue
		}
		seen[key] = x
	}
}

// fastestOf returns the smallest profiled duration of m's fastest model (0: a
// model without a usable profile).
func (v *validator) fastestOf(m *Module) time.Duration {
	best := time.Duration(0)
	for x, va := range m.Choices() {
		d := v.fastest[va.Model]
		if d <= 0 {
			return 0
		}
		if x == 0 || d < best {
			best = d
		}
	}
	return best
}

// dag checks that session s has no cycle and that its SLO is not below the
// fastest possible latency: the longest DAG path of each module's smallest
// profiled duration (over all its entries on all hardware).
func (v *validator) dag(s *Session, i int, spath string) {
	k := fieldKey{sec: secSession, i: i, j: -1}
	order, err := s.TopoOrder()
	if err != nil {
		v.fail(k.with("modules"), s.Source, spath+".modules", "modules form a cycle: %s; after must describe a DAG", strings.Join(s.Cycle(), " -> "))
		return
	}
	if s.SLO <= 0 {
		return
	}
	for _, m := range s.Modules {
		if v.fastestOf(&m) <= 0 {
			return // no usable profile: reported elsewhere
		}
	}
	parents, children := s.graph()
	n := len(s.Modules)
	finish := make([]time.Duration, n) // earliest finish of each module
	pred := make([]int, n)             // the parent that finishes last, -1 for none
	end := -1
	for _, j := range order {
		pred[j] = -1
		var start time.Duration
		anyOf := s.Modules[j].AnyOf() // the first parent to finish starts it
		for _, q := range parents[j] {
			if pred[j] < 0 || !anyOf && finish[q] > start || anyOf && finish[q] < start {
				start, pred[j] = finish[q], q
			}
		}
		finish[j] = start + v.fastestOf(&s.Modules[j])
		if len(children[j]) == 0 && (end < 0 || finish[j] > finish[end]) {
			end = j
		}
	}
	if s.SLO.D() >= finish[end] {
		return
	}
	var path []string
	for j := end; j >= 0; j = pred[j] {
		path = append(path, s.Modules[j].Name)
	}
	for a, b := 0, len(path)-1; a < b; a, b = a+1, b-1 {
		path[a], path[b] = path[b], path[a]
	}
	v.fail(k.with("slo"), s.Source, spath+".slo", "slo %s is below the fastest possible latency %s (path %s): raise the slo or profile faster configs",
		s.SLO.D(), finish[end], strings.Join(path, " -> "))
}

func (v *validator) backends() {
	seen := make(map[string]int, len(v.c.Backends))
	for i, b := range v.c.Backends {
		path := label(secBackend, b.ID, i)
		k := fieldKey{sec: secBackend, i: i, j: -1}
		if b.ID == "" {
			v.fail(k.with("id"), b.Source, path+".id", "must not be empty: want a backend id such as gpu-0")
		} else if j, dup := seen[b.ID]; dup {
			prev := v.c.Backends[j]
			v.fail(k.with("id"), b.Source, path+".id", "backend %s defined at %s and %s: backend ids must be unique",
				b.ID, at(prev.Source, label(secBackend, "", j)), at(b.Source, label(secBackend, "", i)))
		} else {
			seen[b.ID] = i
		}
		if msg := checkAddress(b.Address); msg != "" {
			v.fail(k.with("address"), b.Source, path+".address", "%s", msg)
		}
		v.checkHardwareRef(k.with("hardware"), b.Source, path+".hardware", b.Hardware)
	}
}

// checkAddress returns what is wrong with a backend address, or "".
func checkAddress(addr string) string {
	const want = "want host:port such as 127.0.0.1:9101"
	if addr == "" {
		return "must not be empty: " + want
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return fmt.Sprintf("%q is not host:port: %s", addr, want)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Sprintf("port %q must be a number from 1 to 65535: %s", port, want)
	}
	return ""
}

func (v *validator) membership() {
	switch v.c.Membership {
	case "", "static", "consul":
		return
	}
	v.fail(fieldKey{sec: secMembership, j: -1}, Source{}, "membership", "%q is not a membership: want static (the default: the backends listed in the config) or consul", v.c.Membership)
}
