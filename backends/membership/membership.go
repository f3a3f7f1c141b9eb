package membership

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// Membership is a source of the live backend set. The control loop consumes it.
type Membership interface {
	// Watch calls fn with the current view at once, then with a new Snapshot
	// every time the view changes, all from the goroutine that called Watch,
	// until ctx ends; then it returns nil. It returns an error only when it
	// cannot start (before any fn call). fn must not block for long: changes
	// queue behind it (only the latest view matters, earlier ones are dropped).
	Watch(ctx context.Context, fn func(Snapshot)) error
}

// Member is one backend instance as membership knows it.
type Member struct {
	ID       string  // unique; the Consul service ID, or the config's backend id
	Address  string  // gRPC address host:port the gateway dials
	Hardware string  // hardware type name, e.g. v100
	Price    float64 // cost units per machine-hour; 0 when unknown
	// GPU and GPUMemoryBytes name the device when NVML read it ("" and 0 otherwise).
	GPU            string
	GPUMemoryBytes uint64
	// Models the backend can run (its executor's models); nil when unknown.
	Models []string
	// TLS: the backend serves gRPC over TLS (meta "tls").
	TLS bool
}

// Backend returns m as a config backend, the shape placement.Members and
// metrics.Metrics.SetMembership take.
func (m Member) Backend() api.Backend {
	return api.Backend{ID: m.ID, Address: m.Address, Hardware: m.Hardware, TLS: m.TLS}
}

// CanRun reports whether m can run model: true when m's model list is unknown.
func (m Member) CanRun(model string) bool {
	return m.Models == nil || slices.Contains(m.Models, model)
}

func (m Member) equal(o Member) bool {
	return m.ID == o.ID && m.Address == o.Address && m.Hardware == o.Hardware && m.Price == o.Price &&
		m.GPU == o.GPU && m.GPUMemoryBytes == o.GPUMemoryBytes && slices.Equal(m.Models, o.Models) && m.TLS == o.TLS
}

// Snapshot is one view of the membership. Immutable: fn may keep it, and must
// not modify its slices.
type Snapshot struct {
	Members []Member // sorted by ID
	// Stale is true when the source is unreachable: Members is then the last
	// view it gave (empty if it never answered) and Err says why.
	Stale bool
	// Err is why the view is stale, or, with Stale false, the registrations
	// that were left out because their metadata is malformed (each named).
	Err    error
	At     time.Time // when this view was taken
	Source string    // "static" or "consul"
}

// Backends returns the members as config backends, sorted by ID.
func (s Snapshot) Backends() []api.Backend {
	out := make([]api.Backend, len(s.Members))
	for i, m := range s.Members {
		out[i] = m.Backend()
	}
	return out
}

// ByHardware returns the number of members of each hardware type.
func (s Snapshot) ByHardware() map[string]int {
	out := make(map[string]int)
	for _, m := range s.Members {
		out[m.Hardware]++
	}
	return out
}

// Member returns the member called id.
func (s Snapshot) Member(id string) (Member, bool) {
	i, ok := slices.BinarySearchFunc(s.Members, id, func(m Member, id string) int { return strings.Compare(m.ID, id) })
	if !ok {
		return Member{}, false
	}
	return s.Members[i], true
}

// SameMembers reports whether s and o list the same members with the same
// metadata (Stale, Err and At aside).
func (s Snapshot) SameMembers(o Snapshot) bool {
	return slices.EqualFunc(s.Members, o.Members, Member.equal)
}

func sortMembers(ms []Member) { sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID }) }

// StaticMembership is the config's backends list: one view that never changes
// (membership `static`, the embedded default).
type StaticMembership struct {
	snap Snapshot
}

var _ Membership = (*StaticMembership)(nil)

// Static returns the membership of a config's backends list, each priced from
// the hardware catalog hw (price 0 when its hardware type is not listed).
// The config loader has validated the list (unique ids, host:port addresses).
func Static(backends []api.Backend, hw []api.Hardware) *StaticMembership {
	price := make(map[string]float64, len(hw))
	for _, h := range hw {
		price[h.Name] = h.Price
	}
	ms := make([]Member, len(backends))
	for i, b := range backends {
		ms[i] = Member{ID: b.ID, Address: b.Address, Hardware: b.Hardware, Price: price[b.Hardware], TLS: b.TLS}
	}
	sortMembers(ms)
	return &StaticMembership{snap: Snapshot{Members: ms, At: time.Now(), Source: "static"}}
}

// Snapshot returns the one view.
func (s *StaticMembership) Snapshot() Snapshot { return s.snap }

// Watch calls fn once with the config's list and returns nil when ctx ends.
func (s *StaticMembership) Watch(ctx context.Context, fn func(Snapshot)) error {
	fn(s.snap)
	<-ctx.Done()
	return nil
}

// Metadata keys of a registered backend (Consul service Meta).
const (
	MetaHardware  = "hardware"
	MetaPrice     = "price"      // decimal, cost units per machine-hour
	MetaGPU       = "gpu"        // device name from NVML
	MetaGPUMemory = "gpu_memory" // bytes, decimal
	MetaModels    = "models"     // comma-separated
	MetaTLS       = "tls"        // "true": the backend serves gRPC over TLS
)

// maxMetaValue is Consul's limit on one Meta value, in bytes.
const maxMetaValue = 512

// ErrBadMember is wrapped by errors about a Member that cannot be registered
// or a registration that cannot be read back.
var ErrBadMember = errors.New("bad member")

// validate checks what Register needs of m.
func (m Member) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if m.ID == "" {
		bad("id is empty: want a unique backend id such as gpu-0")
	} else if strings.ContainsAny(m.ID, "/ \t\n") {
		bad("id %q: want no '/' or spaces (it is the Consul service ID)", m.ID)
	}
	if _, port, err := net.SplitHostPort(m.Address); err != nil {
		bad("address %q: want host:port: %v", m.Address, err)
	} else if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		bad("address %q: port must be 1..65535", m.Address)
	}
	if m.Hardware == "" {
		bad("hardware is empty: want a hardware type such as v100")
	}
	if m.Price < 0 || m.Price != m.Price {
		bad("price %v: want a number ≥ 0", m.Price)
	}
	for _, model := range m.Models {
		if model == "" || strings.Contains(model, ",") {
			bad("model %q: want a non-empty name without commas", model)
		}
	}
	if n := len(strings.Join(m.Models, ",")); n > maxMetaValue {
		bad("models: %d bytes comma-joined; Consul allows at most %d in one meta value", n, maxMetaValue)
	}
	if len(m.GPU) > maxMetaValue {
		bad("gpu name: %d bytes; Consul allows at most %d", len(m.GPU), maxMetaValue)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w %q: %w", ErrBadMember, m.ID, errors.Join(errs...))
	}
	return nil
}

// Meta returns m's metadata as registered in Consul (keys Meta*); empty
// values are left out.
func (m Member) Meta() map[string]string {
	meta := map[string]string{
		MetaHardware: m.Hardware,
		MetaPrice:    strconv.FormatFloat(m.Price, 'g', -1, 64),
	}
	if m.GPU != "" {
		meta[MetaGPU] = m.GPU
	}
	if m.GPUMemoryBytes > 0 {
		meta[MetaGPUMemory] = strconv.FormatUint(m.GPUMemoryBytes, 10)
	}
	if m.TLS {
		meta[MetaTLS] = "true"
	}
	if len(m.Models) > 0 {
		models := slices.Clone(m.Models)
		sort.Strings(models)
		meta[MetaModels] = strings.Join(models, ",")
	}
	return meta
}

// memberFromMeta reads a member back from its registration.
func memberFromMeta(id, address string, meta map[string]string) (Member, error) {
	m := Member{ID: id, Address: address, Hardware: meta[MetaHardware], GPU: meta[MetaGPU]}
	var errs []error
	if m.Hardware == "" {
		errs = append(errs, fmt.Errorf("meta %q is missing: want the hardware type", MetaHardware))
	}
	if v, ok := meta[MetaPrice]; ok && v != "" {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil || p < 0 || p != p {
			errs = append(errs, fmt.Errorf("meta %s=%q: want a number ≥ 0", MetaPrice, v))
		}
		m.Price = p
	}
	if v, ok := meta[MetaGPUMemory]; ok && v != "" {
		b, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("meta %s=%q: want bytes as a whole number", MetaGPUMemory, v))
		}
		m.GPUMemoryBytes = b
	}
	switch v := meta[MetaTLS]; v {
	case "", "false":
	case "true":
		m.TLS = true
	default:
		errs = append(errs, fmt.Errorf("meta %s=%q: want true or false", MetaTLS, v))
	}
	if v := meta[MetaModels]; v != "" {
		m.Models = strings.Split(v, ",")
		sort.Strings(m.Models)
	}
	if len(errs) > 0 {
		return Member{}, fmt.Errorf("%w %q at %s: %w", ErrBadMember, id, address, errors.Join(errs...))
	}
	return m, nil
}
