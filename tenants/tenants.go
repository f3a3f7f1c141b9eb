package tenants

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
	"golang.org/x/time/rate"

	"github.com/piccolo-serving/piccolo/metrics"
)

// Priority classes, as gateway.PriorityClass numbers them: a lower number is
// a higher class.
const (
	ClassHigh   = 0
	ClassNormal = 1
	ClassLow    = 2
)

var classNames = map[string]int{"high": ClassHigh, "normal": ClassNormal, "low": ClassLow}

func className(c int) string {
	for n, v := range classNames {
		if v == c {
			return n
		}
	}
	return fmt.Sprint(c)
}

// Sentinels of the refusals, for the edge to map to statuses.
var (
	// ErrUnauthenticated: no API key, or one no tenant holds (401,
	// UNAUTHENTICATED).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrLimited: the tenant's rate or concurrency is used up (429 with
	// Retry-After, RESOURCE_EXHAUSTED).
	ErrLimited = errors.New("tenant limit")
	// ErrForbidden: the tenant may not ask for the priority class it asked
	// for (403, PERMISSION_DENIED).
	ErrForbidden = errors.New("forbidden")
)

// Refusal is why a request was refused; its message is written for the
// client (it names the tenant and the limit, nothing else).
type Refusal struct {
	sentinel error
	msg      string
	// Reason is the metric's label: missing_key, unknown_key, rate,
	// concurrency or priority.
	Reason string
	// RetryAfter is when the client may try again (ErrLimited only).
	RetryAfter time.Duration
}

func (r *Refusal) Error() string { return r.msg }

// RetryAfterHeader is RetryAfter in whole seconds, as the HTTP Retry-After
// header and the gRPC retry-after metadata carry it ("" when none).
func (r *Refusal) RetryAfterHeader() string {
	if r.RetryAfter <= 0 {
		return ""
	}
	return strconv.Itoa(int(r.RetryAfter.Seconds()))
}
func (r *Refusal) Is(target error) bool { return target == r.sentinel }

var (
	errMissingKey = &Refusal{sentinel: ErrUnauthenticated, Reason: "missing_key",
		msg: "unauthenticated: send an API key as `Authorization: Bearer <key>` or `X-API-Key: <key>` (gRPC metadata authorization or x-api-key)"}
	errUnknownKey = &Refusal{sentinel: ErrUnauthenticated, Reason: "unknown_key",
		msg: "unauthenticated: the API key is not known"}
)

// Spec is one tenant as the file gives it.
type Spec struct {
	Name string `yaml:"name"`
	// Keys are the SHA-256 of the tenant's API keys, 64 hex digits each.
	Keys []string `yaml:"keys"`
	// Rate is the requests per second the tenant may send on average (token
	// bucket); 0: no limit.
	Rate float64 `yaml:"rate"`
	// Burst is the bucket's size (0: Rate rounded up, at least 1).
	Burst int `yaml:"burst"`
	// Concurrency caps the tenant's infer requests in flight; 0: no cap.
	Concurrency int `yaml:"concurrency"`
	// MaxPriority is the highest class the tenant may ask for: high, normal
	// ("": the default) or low.
	MaxPriority string `yaml:"max_priority"`
}

// File is the tenants file.
type File struct {
	Tenants []Spec `yaml:"tenants"`
}

// Tenant is one tenant of a loaded table: immutable limits, and the state
// (bucket, requests in flight, counters) it shares with the same name in
// earlier and later tables.
type Tenant struct {
	Name        string
	rate        float64
	burst       int
	concurrency int64
	maxClass    int
	st          *state
}

type state struct {
	lim      *rate.Limiter
	inflight atomic.Int64

	admitted, refusedRate, refusedConcurrency, refusedPriority prometheus.Counter
}

type table struct {
	byKey map[[sha256.Size]byte]*Tenant
	names []string
}

// Tenants is the tenants in force. Identify and the *Tenant methods are
// safe for concurrent use with Set.
type Tenants struct {
	tab atomic.Pointer[table]

	mu     sync.Mutex // Set
	states map[string]*state

	requests, refused *prometheus.CounterVec
	missing, unknown  prometheus.Counter
}

// New returns an empty table (every key unknown) whose metrics are
// registered on reg (nil: not registered).
func New(reg prometheus.Registerer) (*Tenants, error) {
	t := &Tenants{
		states: map[string]*state{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.GatewayTenantRequestsTotal,
			Help: "Infer requests admitted, by tenant (--tenants)."}, []string{"tenant"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metrics.GatewayTenantRefusedTotal,
			Help: "Requests refused by tenant and reason: missing_key and unknown_key (401, tenant \"\"), rate and concurrency (429), priority (403)."},
			[]string{"tenant", "reason"}),
	}
	t.missing = t.refused.WithLabelValues("", "missing_key")
	t.unknown = t.refused.WithLabelValues("", "unknown_key")
	if reg != nil {
		for _, c := range []prometheus.Collector{t.requests, t.refused} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("tenants: %w", err)
			}
		}
	}
	t.tab.Store(&table{})
	return t, nil
}

// Names returns the names of the tenants in force, in the file's order.
func (t *Tenants) Names() []string { return t.tab.Load().names }

// Identify returns the tenant holding key (the API key as the client sent
// it), or a *Refusal matching ErrUnauthenticated when key is empty or no
// tenant holds it.
func (t *Tenants) Identify(key []byte) (*Tenant, error) {
	if len(key) == 0 {
		t.missing.Inc()
		return nil, errMissingKey
	}
	tn := t.tab.Load().byKey[sha256.Sum256(key)]
	if tn == nil {
		t.unknown.Inc()
		return nil, errUnknownKey
	}
	return tn, nil
}

// Admit takes one infer request of the tenant's concurrency and rate, or
// refuses it with a *Refusal matching ErrLimited. After a nil error the
// caller calls Done once the request is answered.
func (tn *Tenant) Admit() error {
	st := tn.st
	if tn.concurrency > 0 && st.inflight.Add(1) > tn.concurrency {
		st.inflight.Add(-1)
		st.refusedConcurrency.Inc()
		return &Refusal{sentinel: ErrLimited, Reason: "concurrency", RetryAfter: time.Second,
			msg: fmt.Sprintf("too many requests: tenant %q has %d requests in flight, its limit", tn.Name, tn.concurrency)}
	}
	if tn.rate > 0 && !st.lim.Allow() {
		if tn.concurrency > 0 {
			st.inflight.Add(-1)
		}
		st.refusedRate.Inc()
		// The time until the bucket holds a token again, in whole seconds.
		wait := time.Duration((1 - st.lim.Tokens()) / tn.rate * float64(time.Second))
		after := max(time.Second, (wait + time.Second - 1).Truncate(time.Second))
		return &Refusal{sentinel: ErrLimited, Reason: "rate", RetryAfter: after,
			msg: fmt.Sprintf("too many requests: tenant %q is over its rate of %g requests/s (burst %d); retry after %v", tn.Name, tn.rate, tn.burst, after)}
	}
	st.admitted.Inc()
	return nil
}

// Done gives back the concurrency Admit took.
func (tn *Tenant) Done() {
	if tn.concurrency > 0 {
		tn.st.inflight.Add(-1)
	}
}

// AllowClass refuses (a *Refusal matching ErrForbidden) a request of a
// priority class above the tenant's highest.
func (tn *Tenant) AllowClass(class int) error {
	if class >= tn.maxClass {
		return nil
	}
	tn.st.refusedPriority.Inc()
	return &Refusal{sentinel: ErrForbidden, Reason: "priority",
		msg: fmt.Sprintf("forbidden: tenant %q may ask for priority class %s and lower, not %s", tn.Name, className(tn.maxClass), className(class))}
}

// Load reads and checks the tenants file at path (Parse).
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tenants file: %w", err)
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("tenants file %s: %w", path, err)
	}
	return f, nil
}

// Parse reads a tenants file and checks it: known fields only, at least one
// tenant, names unique and non-empty, each key 64 hex digits held by one
// tenant only, rate, burst and concurrency ≥ 0 (a burst needs a rate),
// max_priority high, normal or low. Every problem is named.
func Parse(b []byte) (*File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("want YAML `tenants: [{name, keys, rate, burst, concurrency, max_priority}]`: %w", err)
	}
	if len(f.Tenants) == 0 {
		return nil, errors.New("no tenants: every request would be refused; list at least one under `tenants:`")
	}
	var errs []error
	names := map[string]bool{}
	owner := map[string]string{}
	for i, s := range f.Tenants {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("tenants[%d] %q: %s", i, s.Name, fmt.Sprintf(format, args...)))
		}
		switch {
		case s.Name == "":
			bad("name is empty: want a name for the metrics and the log")
		case names[s.Name]:
			bad("name given twice: tenant names must be unique")
		}
		names[s.Name] = true
		if len(s.Keys) == 0 {
			bad("no keys: want the SHA-256 of each API key, 64 hex digits (printf %%s \"$KEY\" | sha256sum)")
		}
		for j, k := range s.Keys {
			h := strings.ToLower(strings.TrimSpace(k))
			if len(h) != 2*sha256.Size || !isHex(h) {
				bad("keys[%d]: want the SHA-256 of the key as 64 hex digits (printf %%s \"$KEY\" | sha256sum), not the key itself; got %d characters", j, len(k))
				continue
			}
			if o, dup := owner[h]; dup {
				bad("keys[%d]: the same key is held by tenant %q: a key names one tenant", j, o)
			}
			owner[h] = s.Name
		}
		if s.Rate < 0 || math.IsNaN(s.Rate) || math.IsInf(s.Rate, 0) {
			bad("rate %v: want requests per second ≥ 0 (0: no limit)", s.Rate)
		}
		if s.Burst < 0 {
			bad("burst %d: want ≥ 0 (0: the rate rounded up)", s.Burst)
		} else if s.Burst > 0 && s.Rate == 0 {
			bad("burst %d without a rate: a burst is the bucket of a rate limit; give rate too", s.Burst)
		}
		if s.Concurrency < 0 {
			bad("concurrency %d: want ≥ 0 (0: no limit)", s.Concurrency)
		}
		if _, ok := classNames[s.MaxPriority]; !ok && s.MaxPriority != "" {
			bad("max_priority %q: want high, normal (the default) or low", s.MaxPriority)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &f, nil
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// Set puts f's tenants in force (f as Parse checked it). A tenant whose
// name was in force before keeps its bucket (re-sized to the new rate and
// burst), its requests in flight and its counters; the state of a tenant no
// longer in f is dropped.
func (t *Tenants) Set(f *File) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tab := &table{byKey: map[[sha256.Size]byte]*Tenant{}}
	states := make(map[string]*state, len(f.Tenants))
	for _, s := range f.Tenants {
		tn := &Tenant{Name: s.Name, rate: s.Rate, burst: s.Burst, concurrency: int64(s.Concurrency), maxClass: ClassNormal}
		if c, ok := classNames[s.MaxPriority]; ok {
			tn.maxClass = c
		}
		if tn.burst == 0 {
			tn.burst = max(1, int(math.Ceil(tn.rate)))
		}
		st := t.states[s.Name]
		if st == nil {
			st = &state{lim: rate.NewLimiter(rate.Limit(tn.rate), tn.burst),
				admitted:           t.requests.WithLabelValues(s.Name),
				refusedRate:        t.refused.WithLabelValues(s.Name, "rate"),
				refusedConcurrency: t.refused.WithLabelValues(s.Name, "concurrency"),
				refusedPriority:    t.refused.WithLabelValues(s.Name, "priority")}
		} else {
			st.lim.SetLimit(rate.Limit(tn.rate))
			st.lim.SetBurst(tn.burst)
		}
		states[s.Name] = st
		tn.st = st
		tab.names = append(tab.names, s.Name)
		for _, k := range s.Keys {
			var h [sha256.Size]byte
			_, _ = hex.Decode(h[:], []byte(strings.ToLower(strings.TrimSpace(k)))) // checked by Parse
			tab.byKey[h] = tn
		}
	}
	t.states = states
	t.tab.Store(tab)
}

// KeyFromAuthorization returns the credentials of an Authorization header
// value with the Bearer scheme (read case-insensitively, RFC 7235 §2.1),
// nil for any other.
func KeyFromAuthorization(v []byte) []byte {
	if len(v) <= len(bearer) || !bytes.EqualFold(v[:len(bearer)], bearer) {
		return nil
	}
	return bytes.TrimSpace(v[len(bearer):])
}

var bearer = []byte("bearer ")
