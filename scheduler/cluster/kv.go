package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	capi "github.com/hashicorp/consul/api"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/placement"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// DefaultPrefix is the KV prefix of a cluster when Options.Prefix is empty.
const DefaultPrefix = "piccolo"

// ErrConfigChanged is returned by PutConfig when the config in Consul is no
// longer the one the caller read (another gateway changed it first).
var ErrConfigChanged = errors.New("the cluster's config changed meanwhile")

// Options configure a Client. The zero value (with an address) is the default.
type Options struct {
	// Prefix is the KV prefix of this cluster (default DefaultPrefix), so
	// several clusters can share one Consul.
	Prefix string
	// WaitTime bounds one blocking query (default 30 s).
	WaitTime time.Duration
	// Logger says when Consul becomes unreachable and is back (once each).
	Logger *zap.Logger
	// Auth is the ACL token and TLS of the Consul client
	// (membership.NewClient).
	Auth membership.ConsulAuth
	// BackendToken, when set, is the credential a Replanner's default
	// membership asks of every backend (membership.ConsulOptions.BackendToken).
	BackendToken string
}

// Client reads and writes one cluster's keys in Consul KV. Safe for concurrent use.
type Client struct {
	c    *capi.Client
	addr string
	auth membership.ConsulAuth
	// backendToken is Options.BackendToken, for the membership a
	// Replanner watches by default.
	backendToken string
	prefix       string
	wait         time.Duration
	log          *zap.Logger
}

// New returns a client of the Consul agent at addr (host:port of its HTTP API).
// It does not contact Consul.
func New(addr string, o Options) (*Client, error) {
	c, err := membership.NewClient(addr, o.Auth)
	if err != nil {
		return nil, err
	}
	cl := &Client{c: c, addr: addr, auth: o.Auth, backendToken: o.BackendToken, prefix: strings.Trim(o.Prefix, "/"), wait: o.WaitTime, log: o.Logger}
	if cl.prefix == "" {
		cl.prefix = DefaultPrefix
	}
	if cl.wait <= 0 {
		cl.wait = 30 * time.Second
	}
	if cl.log == nil {
		cl.log = zap.NewNop()
	}
	return cl, nil
}

func (c *Client) key(parts ...string) string { return c.prefix + "/" + strings.Join(parts, "/") }

// ConfigKey, PlanKey and LockKey are the cluster's keys (see the package doc).
func (c *Client) ConfigKey() string { return c.key("config") }
func (c *Client) PlanKey() string   { return c.key("plan") }
func (c *Client) LockKey() string   { return c.key("scheduler", "leader") }

// ConfigPlanKey holds the plan a gateway's config pipeline made and checked
// for the config it stored (PutConfigPlanned), written in the config's own
// transaction so both carry the same ModifyIndex.
func (c *Client) ConfigPlanKey() string { return c.key("config-plan") }
func (c *Client) ratesPrefix() string {
	return c.key("rates") + "/"
}

// Record is one published plan: the placed plan and the config it serves
// (backends included), so a gateway swaps both in at once. JSON in Consul.
type Record struct {
	// Version counts the leader's publications (it continues from the record
	// it found when it took over); informational: gateways apply whatever
	// record is newest in Consul.
	Version uint64 `json:"version"`
	// Leader is the id of the scheduler that published it.
	Leader string `json:"leader"`
	// Cause is the re-plan cause (replan.Cause*).
	Cause string `json:"cause"`
	// Trigger is when the leader saw the cause; At when it published.
	Trigger time.Time `json:"trigger"`
	At      time.Time `json:"at"`
	// ConfigIndex is the ModifyIndex of the config key this plan was made for.
	ConfigIndex uint64 `json:"config_index"`
	// Config is the config served (api.EncodeYAML, backends = the members the
	// plan may name); decode it with DecodeConfig.
	Config string `json:"config"`
	// Plan is the placed plan: one backend id per machine.
	Plan *api.Plan `json:"plan"`
	// PlanTookMs is the planner's plus placement's runtime, ms.
	PlanTookMs float64 `json:"plan_took_ms"`
	// DevicesMissing is the placement shortfall (devices needed, not present).
	DevicesMissing int `json:"devices_missing"`
	// Capacity is, per hardware type, the devices the plan needs and those
	// present (replan.Shortfall.Hardware): what the cluster is asked for.
	Capacity []placement.HardwareUse `json:"capacity,omitempty"`
}

// DecodeConfig reads a config stored by this package (the config key or a
// Record's Config) through the config loader, so it is validated as a file
// would be; errors name the key.
func DecodeConfig(name string, data []byte) (*api.Config, error) {
	cfg, err := api.LoadBytes(api.NamedDoc{Name: name, Data: data})
	if err != nil {
		return nil, fmt.Errorf("consul %s: %w", name, err)
	}
	return cfg, nil
}

// WithoutBackends is cfg with no backends and static membership: the part of
// a config the cluster shares (backends come from Consul).
func WithoutBackends(cfg *api.Config) *api.Config {
	c := *cfg
	c.Backends, c.Membership = nil, ""
	return &c
}

// Config reads the cluster's config and its ModifyIndex; (nil, 0, nil) when
// there is none yet.
func (c *Client) Config(ctx context.Context) (*api.Config, uint64, error) {
	p, _, err := c.c.KV().Get(c.ConfigKey(), (&capi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, 0, fmt.Errorf("consul %s: read %s: %w", c.addr, c.ConfigKey(), err)
	}
	if p == nil {
		return nil, 0, nil
	}
	cfg, err := DecodeConfig(c.ConfigKey(), p.Value)
	return cfg, p.ModifyIndex, err
}

// ConfigPlan is the plan a gateway's config pipeline made (and checked) for a
// config change it stored: the leader places it instead of planning the
// config again (docs/architecture.md, "Config path"). JSON in Consul.
type ConfigPlan struct {
	// Plan is the planner's output for the config at its configured rates,
	// not placed.
	Plan *api.Plan `json:"plan"`
	// Error is the planner's error for the sessions it could not plan (they
	// are in Plan with Error set); empty when all were planned.
	Error string `json:"error,omitempty"`
	// TookMs is the planner's runtime, ms.
	TookMs float64 `json:"took_ms"`
}

// PutConfig stores cfg (without its backends) as the cluster's config if the
// key's ModifyIndex is still ifIndex (0: only if there is no config yet), and
// returns the new ModifyIndex. ErrConfigChanged when another writer came first.
func (c *Client) PutConfig(ctx context.Context, cfg *api.Config, ifIndex uint64) (uint64, error) {
	return c.PutConfigPlanned(ctx, cfg, nil, ifIndex)
}

// PutConfigPlanned is PutConfig that also stores, in the same transaction,
// the plan made for cfg (under ConfigPlanKey, with cfg's new ModifyIndex), so
// the leader places that plan instead of planning cfg again (ConfigPlanFor).
// planned nil stores the config alone.
func (c *Client) PutConfigPlanned(ctx context.Context, cfg *api.Config, planned *ConfigPlan, ifIndex uint64) (uint64, error) {
	return c.putConfig(ctx, cfg, planned, ifIndex, nil)
}

// putConfig writes the config (check-and-set on ifIndex), its plan and extra
// in one transaction and returns the config's new ModifyIndex.
func (c *Client) putConfig(ctx context.Context, cfg *api.Config, planned *ConfigPlan, ifIndex uint64, extra capi.KVTxnOps) (uint64, error) {
	b, err := api.EncodeYAML(WithoutBackends(cfg))
	if err != nil {
		return 0, err
	}
	// One transaction: its result carries the new ModifyIndex, where a CAS and
	// a read-back would cost a round trip and could see a later writer's index.
	ops := capi.KVTxnOps{{Verb: capi.KVCAS, Key: c.ConfigKey(), Value: b, Index: ifIndex}}
	if planned != nil {
		pb, err := json.Marshal(planned)
		if err != nil {
			return 0, err
		}
		ops = append(ops, &capi.KVTxnOp{Verb: capi.KVSet, Key: c.ConfigPlanKey(), Value: pb})
	}
	ops = append(ops, extra...)
	ok, resp, _, err := c.c.KV().Txn(ops, (&capi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return 0, fmt.Errorf("consul %s: write %s: %w", c.addr, c.ConfigKey(), err)
	}
	if !ok || resp == nil || len(resp.Results) == 0 { // deletes have no result: Results[0] is the config's
		why := ""
		if resp != nil && len(resp.Errors) > 0 {
			e := resp.Errors[0]
			why = " (" + e.What + ")"
			if e.OpIndex > 0 && e.OpIndex < len(ops) && ops[e.OpIndex].Verb == capi.KVCAS {
				// A history version taken: another writer logged a change first.
				return 0, fmt.Errorf("%w: %s was written by another writer first%s", ErrConfigChanged, ops[e.OpIndex].Key, why)
			}
		}
		return 0, fmt.Errorf("%w: %s is no longer at index %d%s", ErrConfigChanged, c.ConfigKey(), ifIndex, why)
	}
	return resp.Results[0].ModifyIndex, nil
}

// ConfigPlanFor reads the plan stored with the config at ModifyIndex index
// (PutConfigPlanned); nil when there is none for that index (the config was
// seeded, or written without a plan, or a later write replaced it) or it
// cannot be read: the caller then plans the config itself.
func (c *Client) ConfigPlanFor(ctx context.Context, index uint64) *ConfigPlan {
	p, _, err := c.c.KV().Get(c.ConfigPlanKey(), (&capi.QueryOptions{}).WithContext(ctx))
	if err != nil || p == nil || p.ModifyIndex != index {
		return nil
	}
	var cp ConfigPlan
	if err := json.Unmarshal(p.Value, &cp); err != nil || cp.Plan == nil {
		return nil
	}
	return &cp
}

// Plan reads the published Record and its ModifyIndex; (nil, 0, nil) when none.
func (c *Client) Plan(ctx context.Context) (*Record, uint64, error) {
	p, _, err := c.c.KV().Get(c.PlanKey(), (&capi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, 0, fmt.Errorf("consul %s: read %s: %w", c.addr, c.PlanKey(), err)
	}
	if p == nil {
		return nil, 0, nil
	}
	var r Record
	if err := json.Unmarshal(p.Value, &r); err != nil {
		return nil, p.ModifyIndex, fmt.Errorf("consul %s: %s is not a plan record: %w", c.addr, c.PlanKey(), err)
	}
	return &r, p.ModifyIndex, nil
}

// KeyEvent is one value of a watched key, or news that Consul is unreachable
// (Err set; the watcher retries and gives a fresh event once it answers).
// Absent tells both apart from a value.
type KeyEvent struct {
	Value []byte
	Index uint64 // the key's ModifyIndex (0: absent)
	Err   error
}

// Absent reports whether ev carries no value: Consul unreachable, or the key
// not there.
func (ev KeyEvent) Absent() bool { return ev.Err != nil || ev.Index == 0 }

// maxBackoff caps the wait between failed queries of a watch.
const maxBackoff = 2 * time.Second

// WatchKey calls fn with the value of key at once and on every change, with
// blocking queries, until ctx ends (returns nil). When Consul does not answer,
// fn gets one Stale event; the watch retries with jittered backoff. fn runs on
// WatchKey's goroutine; a slow fn delays the next query, not other watchers.
func (c *Client) WatchKey(ctx context.Context, key string, fn func(KeyEvent)) error {
	var (
		index, lastMod uint64
		have, stale    bool
		failures       int
	)
	for ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, c.wait+c.wait/16+5*time.Second)
		p, meta, err := c.c.KV().Get(key, (&capi.QueryOptions{WaitIndex: index, WaitTime: c.wait}).WithContext(qctx))
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			index = 0 // a restarted agent counts from 1 again
			failures++
			if !stale {
				stale = true
				c.log.Warn("consul unreachable: keeping the last value", zap.String("key", key), zap.Error(err))
				fn(KeyEvent{Err: err})
			}
			if !membership.Sleep(ctx, membership.Backoff(failures, maxBackoff)) {
				return nil
			}
			continue
		}
		failures = 0
		index = membership.NextIndex(index, meta.LastIndex)
		ev := KeyEvent{}
		if p != nil {
			ev.Value, ev.Index = p.Value, p.ModifyIndex
		}
		if stale {
			c.log.Info("consul reachable again", zap.String("key", key))
		}
		if !have || stale || ev.Index != lastMod {
			fn(ev)
		}
		have, stale, lastMod = true, false, ev.Index
	}
	return nil
}

// WatchPlan calls fn with each new published Record (at once if there is one,
// then on every publication) until ctx ends. A value that is not a Record is
// logged and skipped; Consul unreachable is logged once (the caller keeps
// serving what it applied).
func (c *Client) WatchPlan(ctx context.Context, fn func(*Record)) error {
	return c.WatchKey(ctx, c.PlanKey(), func(ev KeyEvent) {
		if ev.Absent() {
			return
		}
		var r Record
		if err := json.Unmarshal(ev.Value, &r); err != nil || r.Plan == nil {
			c.log.Error("ignoring a value of the plan key that is not a plan record", zap.String("key", c.PlanKey()), zap.Error(err))
			return
		}
		fn(&r)
	})
}

// PutRates stores gateway's rate snapshot under the rates prefix.
func (c *Client) PutRates(ctx context.Context, gateway string, s replan.RateSnapshot) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = c.c.KV().Put(&capi.KVPair{Key: c.ratesPrefix() + gateway, Value: b}, (&capi.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("consul %s: write rates: %w", c.addr, err)
	}
	return nil
}

// GatewayRates is one gateway's reported snapshot and the key's ModifyIndex
// (which changes at each report, whatever the gateway's clock says).
type GatewayRates struct {
	Gateway  string
	Index    uint64
	Snapshot replan.RateSnapshot
}

// Rates lists every gateway's last report. Malformed values are skipped and
// named in the error, which is returned with the good ones.
func (c *Client) Rates(ctx context.Context) ([]GatewayRates, error) {
	ps, _, err := c.c.KV().List(c.ratesPrefix(), (&capi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("consul %s: list rates: %w", c.addr, err)
	}
	var (
		out  []GatewayRates
		errs []error
	)
	for _, p := range ps {
		g := GatewayRates{Gateway: strings.TrimPrefix(p.Key, c.ratesPrefix()), Index: p.ModifyIndex}
		if err := json.Unmarshal(p.Value, &g.Snapshot); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Key, err))
			continue
		}
		out = append(out, g)
	}
	return out, errors.Join(errs...)
}

// DeleteRates removes gateway's report (a gateway stopping cleanly).
func (c *Client) DeleteRates(ctx context.Context, gateway string) error {
	_, err := c.c.KV().Delete(c.ratesPrefix()+gateway, (&capi.WriteOptions{}).WithContext(ctx))
	return err
}

// calibrationPrefix is where each gateway keeps its calibration
// (<prefix>/calibration/<gateway>; docs/calibration.md, "What persists").
func (c *Client) calibrationPrefix() string { return c.key("calibration") + "/" }

// PutCalibration stores gateway's calibration (calibrate.Estimator.Marshal's
// JSON, opaque here).
func (c *Client) PutCalibration(ctx context.Context, gateway string, data []byte) error {
	_, err := c.c.KV().Put(&capi.KVPair{Key: c.calibrationPrefix() + gateway, Value: data}, (&capi.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("consul %s: write calibration: %w", c.addr, err)
	}
	return nil
}

// Calibrations returns every gateway's stored calibration, gateway first
// (its own, then the others by key), so a restarted gateway resumes with its
// own series and learns the devices only the others measured.
func (c *Client) Calibrations(ctx context.Context, gateway string) ([][]byte, error) {
	ps, _, err := c.c.KV().List(c.calibrationPrefix(), (&capi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("consul %s: list calibrations: %w", c.addr, err)
	}
	var own, out [][]byte
	for _, p := range ps {
		if strings.TrimPrefix(p.Key, c.calibrationPrefix()) == gateway {
			own = append(own, p.Value)
		} else {
			out = append(out, p.Value)
		}
	}
	return append(own, out...), nil
}
