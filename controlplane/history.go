package controlplane

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.yaml.in/yaml/v3"

	"github.com/piccolo-serving/piccolo/api"
)

// HistoryLen is how many config versions a ConfigStore keeps (the newest);
// older ones can no longer be listed or rolled back to.
const HistoryLen = 100

// Change is one version of the running config in the store's history (GET
// /admin/history): who made it and when, the sessions it added, modified or
// removed, a unified diff of the sessions' YAML against the version before,
// and the cost of the plan live right after it (price units per hour; 0
// when the store has no plan source). With --consul the admin API lists
// the cluster's history instead (ConsulControl.History, Consul KV; the same
// fields, cluster_history.go); the store's own then serves only fileGuard.
type Change struct {
	Version  uint64    `json:"version"`
	At       time.Time `json:"at"`
	Cause    string    `json:"cause"` // "initial", "config" (file), "manual" (admin API), or Adopt's
	Who      string    `json:"who"`   // the admin token's name ("admin": --admin-token's), "file"; with --consul also "consul"
	Note     string    `json:"note,omitempty"`
	Sessions []string  `json:"sessions"` // changed: added, modified or removed
	Diff     string    `json:"diff,omitempty"`
	PlanCost float64   `json:"plan_cost"`

	cfg *api.Config // the version's config, for rollback (immutable)
}

// history is a ConfigStore's bounded log of versions, safe from any goroutine.
type history struct {
	mu      sync.Mutex
	changes []Change // oldest first, at most HistoryLen
}

type whoKey struct{}

// WithWho names who makes the changes done with ctx (ConfigStore.Update
// records it in the history); note, when not empty, is kept beside it
// ("rollback to version 3"). Without it the cause decides: "file" for
// "config", "admin" for "manual".
func WithWho(ctx context.Context, who, note string) context.Context {
	return context.WithValue(ctx, whoKey{}, [2]string{who, note})
}

type versionSinkKey struct{}

// withVersionSink makes ctx carry v, where a Control that records a change in
// a history of its own (ConsulControl: the cluster's, in Consul KV) stores
// the version the change got there.
func withVersionSink(ctx context.Context, v *uint64) context.Context {
	return context.WithValue(ctx, versionSinkKey{}, v)
}

func tellVersion(ctx context.Context, v uint64) {
	if p, ok := ctx.Value(versionSinkKey{}).(*uint64); ok {
		*p = v
	}
}

func whoOf(ctx context.Context, cause string) (who, note string) {
	if v, ok := ctx.Value(whoKey{}).([2]string); ok {
		return v[0], v[1]
	}
	switch cause {
	case "config", "initial":
		return "file", ""
	case "manual":
		return "admin", ""
	}
	return cause, ""
}

// add records snap, made from prev (nil for the first version).
func (h *history) add(prev *api.Config, snap ConfigSnapshot, who, note string, cost float64) {
	c := Change{Version: snap.Version, At: snap.At, Cause: snap.Cause, Who: who, Note: note, PlanCost: cost, cfg: snap.Config}
	c.Sessions, c.Diff = diffSessions(prev, snap.Config, snap.Version)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.changes) == HistoryLen {
		h.changes = slices.Delete(h.changes, 0, 1)
	}
	h.changes = append(h.changes, c)
}

func (h *history) list() []Change {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.changes)
}

// sessionYAML is one session in the config file's form; "" when absent.
func sessionYAML(cfg *api.Config, name string) string {
	if cfg == nil {
		return ""
	}
	s, ok := cfg.Session(name)
	if !ok {
		return ""
	}
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(toSessionJSON(s)); err != nil {
		return fmt.Sprintf("# %v\n", err)
	}
	return b.String()
}

func sessionNames(cfgs ...*api.Config) []string {
	var out []string
	for _, c := range cfgs {
		if c == nil {
			continue
		}
		for _, s := range c.Sessions {
			out = append(out, s.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// diffSessions lists the sessions that differ between prev and next and the
// unified diff of their YAML (difflib: the unified format operators read
// from git and kubectl diff).
func diffSessions(prev, next *api.Config, version uint64) ([]string, string) {
	changed := []string{}
	var a, b strings.Builder
	for _, n := range sessionNames(prev, next) {
		x, y := sessionYAML(prev, n), sessionYAML(next, n)
		if prev != nil && x == y {
			continue
		}
		changed = append(changed, n)
		a.WriteString(indentDoc(x))
		b.WriteString(indentDoc(y))
	}
	if prev == nil || len(changed) == 0 {
		return changed, ""
	}
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: splitLines(a.String()), B: splitLines(b.String()),
		FromFile: "version " + strconv.FormatUint(version-1, 10), ToFile: "version " + strconv.FormatUint(version, 10), Context: 3})
	if err != nil {
		return changed, err.Error()
	}
	return changed, d
}

// splitLines is s's lines, each with its "\n" (difflib.SplitLines would add
// an empty last line).
func splitLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// indentDoc makes a session's YAML an item of a sessions: list.
func indentDoc(s string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i := range lines {
		if i == 0 {
			lines[i] = "- " + lines[i]
		} else {
			lines[i] = "  " + lines[i]
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// History returns the versions kept (at most HistoryLen), oldest first.
func (s *ConfigStore) History() []Change { return s.hist.list() }

// SetPlan gives the store the running plan, whose cost each history entry
// records (StartGateway: LiveSwitch.Plan). Call it before the first Update.
// The latest version kept (the initial one) gets the plan's cost now.
func (s *ConfigStore) SetPlan(plan func() *api.Plan) {
	s.plan = plan
	s.hist.mu.Lock()
	defer s.hist.mu.Unlock()
	if n := len(s.hist.changes); n > 0 && s.hist.changes[n-1].PlanCost == 0 {
		s.hist.changes[n-1].PlanCost = s.planCost()
	}
}

func (s *ConfigStore) planCost() float64 {
	if s.plan == nil {
		return 0
	}
	if p := s.plan(); p != nil {
		return p.TotalCost
	}
	return 0
}

// fileGuard refuses a reload of the -c files (next) that would overwrite a
// session the admin API changed after the files were last applied, when the
// file that now defines the session (or, for a session the files drop, every
// file) was last written before that change (by more than mtimeSlack): the
// admin change is newer. A
// file written after it wins, as an edit made later should. Called under
// the store's lock (inside Update's change).
func (s *ConfigStore) fileGuard(cur, next *api.Config, files []string) error {
	changes := s.hist.list()
	start := 0
	for i, c := range changes {
		if c.Cause == "config" || c.Cause == "initial" {
			start = i + 1
		}
	}
	seen := map[string]bool{}
	for i := len(changes) - 1; i >= start; i-- { // newest first: a session's latest admin change decides
		c := changes[i]
		if c.Cause != "manual" {
			continue
		}
		for _, name := range c.Sessions {
			if seen[name] || sessionYAML(cur, name) == sessionYAML(next, name) {
				continue
			}
			seen[name] = true
			from := files
			if ns, ok := next.Session(name); ok && ns.Source.File != "" {
				from = []string{ns.Source.File}
			}
			var newest time.Time
			for _, f := range from {
				if st, err := os.Stat(f); err == nil && st.ModTime().After(newest) {
					newest = st.ModTime()
				}
			}
			if newest.Before(c.At.Add(-mtimeSlack)) {
				return fmt.Errorf("the files would overwrite session %q, changed through the admin API (by %s) at version %d, %s, after %s was last written (%s): "+
					"refused; to keep the admin change, write it into the file (GET /admin/sessions/%s with Accept: application/yaml); to let the file win, save it again",
					name, c.Who, c.Version, c.At.UTC().Format(time.RFC3339), strings.Join(from, ", "), newest.UTC().Format(time.RFC3339), name)
			}
		}
	}
	return nil
}

// mtimeSlack is how much older than an admin change a file must be for
// fileGuard to call it older: file systems stamp writes with a coarse clock
// (a jiffy on Linux, up to 2 s on FAT), so a save right after a change may
// carry a time just before it.
const mtimeSlack = time.Second

// fileRefusals counts reloads of the -c files refused by fileGuard.
func newFileRefusals() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "piccolo_config_file_overwrites_refused_total",
		Help: "Reloads of the -c files refused because they would overwrite a newer admin API change to a session."})
}

// changes is the history the admin API lists and rolls back from: the
// cluster's (AdminOptions.History) or the store's. A history that cannot be
// read (Consul unreachable) is a 503.
func (a *Admin) changes() ([]Change, error) {
	if a.opts.History == nil {
		return a.opts.Store.History(), nil
	}
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	changes, err := a.opts.History(c)
	if err != nil {
		return nil, &adminError{status: 503, msg: fmt.Sprintf("the config history cannot be read: %v", err)}
	}
	return changes, nil
}

// history answers GET /admin/history: {"changes": [Change...]}, oldest first.
func (a *Admin) history(ctx *fasthttp.RequestCtx) {
	changes, err := a.changes()
	if err != nil {
		a.fail(ctx, err)
		return
	}
	a.setVersion(ctx, a.opts.Store.Current().Version)
	a.writeJSON(ctx, 200, struct {
		Changes []Change `json:"changes"`
	}{changes})
}

// rollback answers POST /admin/sessions/{name}:rollback?to=VERSION: the
// session as it was at VERSION (removed, when it did not exist then) applied
// through the normal route (ConfigStore.Update, cause "manual"): a new
// version, planned and checked as any change, 422 when the pool can no
// longer carry it.
func (a *Admin) rollback(ctx *fasthttp.RequestCtx, name string) {
	to := string(ctx.QueryArgs().Peek("to"))
	v, err := strconv.ParseUint(to, 10, 64)
	if err != nil || v == 0 {
		a.fail(ctx, &adminError{status: 400, msg: fmt.Sprintf("to=%q: want the config version to roll back to, such as ?to=3 (GET /admin/history lists them)", to)})
		return
	}
	changes, err := a.changes()
	if err != nil {
		a.fail(ctx, err)
		return
	}
	i := slices.IndexFunc(changes, func(c Change) bool { return c.Version == v })
	if i < 0 {
		kept := "none"
		if len(changes) > 0 {
			kept = fmt.Sprintf("%d to %d", changes[0].Version, changes[len(changes)-1].Version)
		}
		a.fail(ctx, &adminError{status: 404, msg: fmt.Sprintf("version %d is not in the history; versions kept: %s", v, kept)})
		return
	}
	old := changes[i].cfg
	if old == nil {
		a.fail(ctx, &adminError{status: 409, msg: fmt.Sprintf("version %d is listed but its sessions were not kept (%s): it cannot be rolled back to", v, changes[i].Note)})
		return
	}
	start := time.Now()
	var hv uint64
	snap, err := a.updateAs(ctx, 0, fmt.Sprintf("rollback of %s to version %d", name, v), &hv, func(cur *api.Config) (*api.Config, error) {
		next := *cur
		next.Sessions = slices.Clone(cur.Sessions)
		j := sessionIndex(cur, name)
		s, then := old.Session(name)
		switch {
		case then && j >= 0:
			next.Sessions[j] = *s
		case then:
			next.Sessions = append(next.Sessions, *s)
		case j >= 0:
			next.Sessions = slices.Delete(next.Sessions, j, j+1)
		default:
			return nil, unknownSession(name, cur)
		}
		return &next, nil
	})
	if err != nil {
		a.logChange("session rollback refused", name, err)
		a.fail(ctx, err)
		return
	}
	a.logChange("session rolled back", name, nil)
	a.setVersion(ctx, snap.Version)
	var sj *sessionJSON
	if s, ok := snap.Config.Session(name); ok {
		x := toSessionJSON(s)
		sj = &x
	}
	deleted := ""
	if sj == nil {
		deleted = name
	}
	a.writeJSON(ctx, 200, a.result(snap, hv, start, sj, deleted))
}
