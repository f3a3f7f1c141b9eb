package controlplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/simulate"
)

// AdminMaxBodyBytes bounds the body of PUT /admin/sessions/{name}.
const AdminMaxBodyBytes = 1 << 20

// BackendView is what GET /admin/backends answers: api.BackendView, the wire
// format `piccolo status` reads too.
type BackendView = api.BackendView

// BackendInfo is one backend of a BackendView (api.BackendInfo).
type BackendInfo = api.BackendInfo

// AdminOptions configure the admin API.
type AdminOptions struct {
	// Token is a bearer token an admin request may carry (Authorization:
	// Bearer <token>), named DefaultAdminTokenName ("admin") in the history.
	Token string
	// Tokens are named tokens (LoadAdminTokens, --admin-tokens FILE), each
	// accepted as Token is; the history records a change's token by name.
	// Token or Tokens is required: the API is off without one.
	Tokens []AdminToken
	// Store holds the running config; PUT and DELETE change it through
	// ConfigStore.Update (cause "manual"). Required.
	Store *ConfigStore
	// Plan returns the running placed plan (LiveSwitch.Plan). Required.
	Plan func() *api.Plan
	// Backends returns the current membership; nil: the running config's
	// static backends list.
	Backends func() BackendView
	// DryRun plans a changed config through the config pipeline without
	// making it live (EmbeddedControl.DryRun); nil: dry runs answer 501.
	DryRun func(cfg *api.Config) (*api.Plan, error)
	// Served is how the gateway dispatches (Policy, Flush, Admission), which
	// a dry run's simulated attainment runs the plan under; its other
	// fields are ignored. Zero: TC, the deadline flush, no admission.
	Served simulate.Options
	// Timeout bounds one change: re-planning, loading models, swapping
	// (default 2 minutes).
	Timeout time.Duration
	// Logger gets one line per change made or refused; nil logs nothing.
	Logger *zap.Logger
	// History lists the config history (GET /admin/history, and where a
	// rollback finds its version): ConsulControl.History with --consul, the
	// cluster's in Consul KV; nil: the Store's own.
	History func(ctx context.Context) ([]Change, error)
	// Gatherer is the gateway's metrics registry, which the live view
	// (view.go, /admin/view/) reads; nil: the view's figures answer 501.
	// With it NewAdmin starts a sampler goroutine that Close stops.
	Gatherer prometheus.Gatherer
}

// Admin serves the admin API on the gateway's HTTP port (ServerOptions.Admin):
//
//	GET    /admin/sessions          every session (JSON; YAML with Accept: application/yaml)
//	GET    /admin/sessions/{name}   one session; ETag: the config version
//	PUT    /admin/sessions/{name}   create or replace it (body: one session, YAML or JSON)
//	DELETE /admin/sessions/{name}   remove it
//	PUT    /admin/sessions/{name}?dry_run=true, POST /admin/sessions/{name}:plan,
//	DELETE /admin/sessions/{name}?dry_run=true
//	                                the change's plan against the running one (PlanDiff); nothing changes
//	POST   /admin/sessions/{name}:rollback?to=VERSION   the session as it was at VERSION, applied
//	GET    /admin/history           the versions kept (Change), oldest first
//	GET    /admin/plan              the running placed plan (plan JSON)
//	GET    /admin/backends          the membership (BackendView)
//	GET    /admin/view/             the live view, a page for a browser (view.go; its files need no token)
//	GET    /admin/view/state        the live view's figures (status.LiveReport over the last minute)
//
// Its handlers run on the HTTP server's goroutines; changes are serialised by
// the ConfigStore. See docs/control-plane.md for bodies and status codes.
type Admin struct {
	opts    AdminOptions
	tokens  []AdminToken // immutable after NewAdmin
	timeout time.Duration
	view    *viewSampler // nil without opts.Gatherer
}

// NewAdmin returns the admin API, or an error when a required option is missing.
func NewAdmin(opts AdminOptions) (*Admin, error) {
	tokens, err := adminTokens(opts.Token, opts.Tokens)
	if err != nil {
		return nil, err
	}
	switch {
	case opts.Store == nil:
		return nil, errors.New("controlplane: the admin API needs a ConfigStore")
	case opts.Plan == nil:
		return nil, errors.New("controlplane: the admin API needs the running plan (AdminOptions.Plan)")
	}
	a := &Admin{opts: opts, tokens: tokens, timeout: opts.Timeout}
	if a.timeout <= 0 {
		a.timeout = 2 * time.Minute
	}
	if opts.Gatherer != nil {
		log := opts.Logger
		if log == nil {
			log = zap.NewNop()
		}
		a.view = newViewSampler(opts.Gatherer, log)
	}
	return a, nil
}

var (
	prefAdminSessions = "/admin/sessions/"
	bearerPrefix      = []byte("Bearer ")
)

// adminError is an error answered with its own status and, for invalid configs,
// the loader's problems one per entry.
type adminError struct {
	status   int
	msg      string
	problems []string
}

func (e *adminError) Error() string { return e.msg }

// authorized checks the bearer token against every admin token in constant
// time (both sides hashed, so the token's length does not leak either) and
// returns the matching token's name; "" when none matches.
func (a *Admin) authorized(ctx *fasthttp.RequestCtx) string {
	h := ctx.Request.Header.Peek("Authorization")
	// The scheme is case-insensitive (RFC 7235 §2.1): "bearer TOKEN" too.
	if len(h) < len(bearerPrefix) || !bytes.EqualFold(h[:len(bearerPrefix)], bearerPrefix) {
		return ""
	}
	return matchToken(a.tokens, sha256.Sum256(bytes.TrimSpace(h[len(bearerPrefix):])))
}

// tokenNameKey is the fasthttp user value holding the request's token name.
const tokenNameKey = "piccolo.admin.token"

// Handle answers one request whose path starts with /admin/.
func (a *Admin) Handle(ctx *fasthttp.RequestCtx) {
	if a.viewAsset(ctx, string(ctx.Path())) {
		return
	}
	who := a.authorized(ctx)
	if who == "" {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="piccolo-admin"`)
		a.fail(ctx, &adminError{status: http.StatusUnauthorized,
			msg: "unauthorized: send the admin token as `Authorization: Bearer <token>`"})
		return
	}
	ctx.SetUserValue(tokenNameKey, who)
	path := string(ctx.Path())
	switch {
	case path == "/admin/plan":
		if a.allow(ctx, "GET") && a.queryOK(ctx) {
			a.writeJSON(ctx, 200, a.opts.Plan())
		}
	case path == "/admin/backends":
		if a.allow(ctx, "GET") && a.queryOK(ctx) {
			a.writeJSON(ctx, 200, a.backends())
		}
	case path == "/admin/view/state":
		if a.allow(ctx, "GET") && a.queryOK(ctx) {
			a.viewStateHandler(ctx)
		}
	case path == "/admin/history":
		if a.allow(ctx, "GET") && a.queryOK(ctx) {
			a.history(ctx)
		}
	case path == "/admin/sessions" || path == "/admin/sessions/":
		if a.allow(ctx, "GET") && a.queryOK(ctx) {
			a.listSessions(ctx)
		}
	case strings.HasPrefix(path, prefAdminSessions):
		// One name check for every route under /admin/sessions/: the
		// custom verbs (:rollback, :plan) take the same {name}.
		name, verb := path[len(prefAdminSessions):], ""
		for _, v := range []string{":rollback", ":plan"} {
			if n, ok := strings.CutSuffix(name, v); ok {
				name, verb = n, v
				break
			}
		}
		if name == "" || strings.Contains(name, "/") {
			a.fail(ctx, &adminError{status: 404, msg: fmt.Sprintf("no endpoint %q: want /admin/sessions/{name}[:plan|:rollback]", path)})
			return
		}
		switch verb {
		case ":rollback":
			if a.allow(ctx, "POST") && a.queryOK(ctx, "to") {
				a.rollback(ctx, name)
			}
			return
		case ":plan":
			if a.allow(ctx, "POST") && a.queryOK(ctx) {
				a.putSession(ctx, name, true)
			}
			return
		}
		switch string(ctx.Method()) {
		case "GET", "HEAD":
			if a.queryOK(ctx) {
				a.getSession(ctx, name)
			}
		case "PUT":
			if dry, ok := a.dryRunParam(ctx); ok {
				a.putSession(ctx, name, dry)
			}
		case "DELETE":
			if dry, ok := a.dryRunParam(ctx); ok {
				a.deleteSession(ctx, name, dry)
			}
		default:
			ctx.Response.Header.Set("Allow", "GET, PUT, DELETE")
			a.fail(ctx, &adminError{status: 405, msg: fmt.Sprintf("method %s not allowed on %s; use GET, PUT or DELETE", ctx.Method(), path)})
		}
	default:
		a.fail(ctx, &adminError{status: 404, msg: fmt.Sprintf("no endpoint %q; endpoints: /admin/sessions, /admin/sessions/{name}, /admin/sessions/{name}:plan, /admin/sessions/{name}:rollback, /admin/history, /admin/plan, /admin/backends, /admin/view/", path)})
	}
}

// queryOK refuses (400) a request with a query parameter not in allowed,
// naming it and the allowed ones: a parameter the API does not know is never
// dropped (`?dry_run=true` on a server without dry runs would apply the change).
func (a *Admin) queryOK(ctx *fasthttp.RequestCtx, allowed ...string) bool {
	var bad string
	for k := range ctx.QueryArgs().All() {
		if !slices.Contains(allowed, string(k)) {
			bad = string(k)
			break
		}
	}
	if bad == "" {
		return true
	}
	want := "none"
	if len(allowed) > 0 {
		want = strings.Join(allowed, ", ")
	}
	a.fail(ctx, &adminError{status: 400, msg: fmt.Sprintf("unknown query parameter %q on %s %s; allowed: %s", bad, ctx.Method(), ctx.Path(), want)})
	return false
}

// dryRunParam reads ?dry_run=true|false (the only parameter of PUT and
// DELETE); ok is false when the request was refused (400).
func (a *Admin) dryRunParam(ctx *fasthttp.RequestCtx) (dry, ok bool) {
	if !a.queryOK(ctx, "dry_run") {
		return false, false
	}
	v := ctx.QueryArgs().Peek("dry_run")
	if !ctx.QueryArgs().Has("dry_run") {
		return false, true
	}
	switch string(v) {
	case "true", "1", "":
		return true, true
	case "false", "0":
		return false, true
	}
	a.fail(ctx, &adminError{status: 400, msg: fmt.Sprintf("dry_run=%q: allowed: true, false", v)})
	return false, false
}

func (a *Admin) allow(ctx *fasthttp.RequestCtx, method string) bool {
	m := string(ctx.Method())
	if m == method || method == "GET" && m == "HEAD" {
		return true
	}
	ctx.Response.Header.Set("Allow", method)
	a.fail(ctx, &adminError{status: 405, msg: fmt.Sprintf("method %s not allowed on %s; use %s", m, ctx.Path(), method)})
	return false
}

// backends is the membership with what the running plan placed on each backend.
func (a *Admin) backends() BackendView {
	var v BackendView
	if a.opts.Backends != nil {
		v = a.opts.Backends()
	} else {
		cfg := a.opts.Store.Current().Config
		v = BackendView{Source: "static", Backends: make([]BackendInfo, len(cfg.Backends))}
		for i, b := range cfg.Backends {
			price := 0.0
			if h, ok := cfg.HardwareByName(b.Hardware); ok {
				price = h.Price
			}
			v.Backends[i] = BackendInfo{ID: b.ID, Address: b.Address, Hardware: b.Hardware, Price: price}
		}
	}
	placed := map[string][]string{}
	if p := a.opts.Plan(); p != nil {
		for m := range p.Machines() {
			placed[m.Backend] = append(placed[m.Backend], m.Session.Name+"/"+m.Module.Name)
		}
	}
	out := v
	out.Backends = make([]BackendInfo, len(v.Backends))
	for i, b := range v.Backends {
		b.Placed = dedupSorted(placed[b.ID])
		out.Backends[i] = b
	}
	if out.Backends == nil {
		out.Backends = []BackendInfo{}
	}
	return out
}

func dedupSorted(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	s = append([]string(nil), s...)
	sort.Strings(s)
	out := s[:1]
	for _, x := range s[1:] {
		if x != out[len(out)-1] {
			out = append(out, x)
		}
	}
	return out
}

// sessionJSON is a session with the config file's field names.
type sessionJSON struct {
	Name    string       `json:"name" yaml:"name"`
	SLO     string       `json:"slo" yaml:"slo"`
	Modules []moduleJSON `json:"modules" yaml:"modules"`
}

type moduleJSON struct {
	Name  string   `json:"name" yaml:"name"`
	Model string   `json:"model" yaml:"model"`
	Rate  float64  `json:"rate" yaml:"rate"`
	After []string `json:"after,omitempty" yaml:"after,omitempty,flow"`
}

func toSessionJSON(s *api.Session) sessionJSON {
	out := sessionJSON{Name: s.Name, SLO: s.SLO.D().String(), Modules: make([]moduleJSON, len(s.Modules))}
	for i, m := range s.Modules {
		out.Modules[i] = moduleJSON{Name: m.Name, Model: m.Model, Rate: m.Rate, After: m.After}
	}
	return out
}

// wantsYAML reports whether the client asked for YAML (Accept: application/yaml,
// text/yaml or application/x-yaml).
func wantsYAML(ctx *fasthttp.RequestCtx) bool {
	return bytes.Contains(ctx.Request.Header.Peek("Accept"), []byte("yaml"))
}

func (a *Admin) listSessions(ctx *fasthttp.RequestCtx) {
	snap := a.opts.Store.Current()
	list := make([]sessionJSON, len(snap.Config.Sessions))
	for i := range snap.Config.Sessions {
		list[i] = toSessionJSON(&snap.Config.Sessions[i])
	}
	a.setVersion(ctx, snap.Version)
	if wantsYAML(ctx) {
		a.writeYAML(ctx, struct {
			Sessions []sessionJSON `yaml:"sessions"`
		}{list})
		return
	}
	a.writeJSON(ctx, 200, struct {
		Version  uint64        `json:"version"`
		Sessions []sessionJSON `json:"sessions"`
	}{snap.Version, list})
}

func (a *Admin) getSession(ctx *fasthttp.RequestCtx, name string) {
	snap := a.opts.Store.Current()
	s, ok := snap.Config.Session(name)
	if !ok {
		a.fail(ctx, unknownSession(name, snap.Config))
		return
	}
	a.setVersion(ctx, snap.Version)
	if wantsYAML(ctx) {
		a.writeYAML(ctx, toSessionJSON(s))
		return
	}
	a.writeJSON(ctx, 200, toSessionJSON(s))
}

func unknownSession(name string, cfg *api.Config) *adminError {
	names := make([]string, len(cfg.Sessions))
	for i, s := range cfg.Sessions {
		names[i] = s.Name
	}
	sort.Strings(names)
	return &adminError{status: 404, msg: fmt.Sprintf("%v %q; known sessions: %s", gateway.ErrUnknownSession, name, strings.Join(names, ", "))}
}

// changeResult is the answer to a change that went live. HistoryVersion,
// with --consul, is the version the change got in the cluster's history
// (Version is this gateway's config version, its ETag).
type changeResult struct {
	Version        uint64       `json:"version"`
	HistoryVersion uint64       `json:"history_version,omitempty"`
	Session        *sessionJSON `json:"session,omitempty"`
	Deleted        string       `json:"deleted,omitempty"`
	PlanCost       float64      `json:"plan_cost"`
	TookMs         float64      `json:"took_ms"`
	Sessions       []string     `json:"sessions"`
	PlanError      string       `json:"plan_error,omitempty"`
}

func (a *Admin) putSession(ctx *fasthttp.RequestCtx, name string, dry bool) {
	body := ctx.PostBody()
	if len(body) > AdminMaxBodyBytes {
		a.fail(ctx, &adminError{status: 413, msg: fmt.Sprintf("the body is %d bytes; a session must fit in %d", len(body), AdminMaxBodyBytes)})
		return
	}
	ifv, err := ifMatch(ctx)
	if err != nil {
		a.fail(ctx, err)
		return
	}
	start := time.Now()
	created := false
	docName := "PUT /admin/sessions/" + name
	if dry {
		snap := a.opts.Store.Current()
		next, err := withSession(snap.Config, name, body, docName)
		if err != nil {
			a.fail(ctx, err)
			return
		}
		a.dryRun(ctx, name, snap.Version, next)
		return
	}
	var hv uint64
	snap, err := a.updateAs(ctx, ifv, "", &hv, func(cur *api.Config) (*api.Config, error) {
		_, exists := cur.Session(name)
		created = !exists
		return withSession(cur, name, body, docName)
	})
	if err != nil {
		a.logChange("session change refused", name, err)
		a.fail(ctx, err)
		return
	}
	s, _ := snap.Config.Session(name)
	sj := toSessionJSON(s)
	a.logChange("session changed", name, nil)
	status := 200
	if created {
		status = 201
	}
	a.setVersion(ctx, snap.Version)
	a.writeJSON(ctx, status, a.result(snap, hv, start, &sj, ""))
}

func (a *Admin) deleteSession(ctx *fasthttp.RequestCtx, name string, dry bool) {
	ifv, err := ifMatch(ctx)
	if err != nil {
		a.fail(ctx, err)
		return
	}
	start := time.Now()
	without := func(cur *api.Config) (*api.Config, error) {
		i := sessionIndex(cur, name)
		if i < 0 {
			return nil, unknownSession(name, cur)
		}
		next := *cur
		next.Sessions = append(append([]api.Session(nil), cur.Sessions[:i]...), cur.Sessions[i+1:]...)
		return &next, nil
	}
	if dry {
		snap := a.opts.Store.Current()
		next, err := without(snap.Config)
		if err != nil {
			a.fail(ctx, err)
			return
		}
		a.dryRun(ctx, name, snap.Version, next)
		return
	}
	var hv uint64
	snap, err := a.updateAs(ctx, ifv, "", &hv, without)
	if err != nil {
		a.logChange("session delete refused", name, err)
		a.fail(ctx, err)
		return
	}
	a.logChange("session deleted", name, nil)
	a.setVersion(ctx, snap.Version)
	a.writeJSON(ctx, 200, a.result(snap, hv, start, nil, name))
}

// updateAs makes a change through the store (cause "manual"), recorded in
// the history as made by the request's token (its name) with note (a
// rollback's; "" for none); hv gets the change's version in a Control's own
// history (the cluster's, with --consul), 0 without one.
func (a *Admin) updateAs(ctx *fasthttp.RequestCtx, ifVersion uint64, note string, hv *uint64, change func(*api.Config) (*api.Config, error)) (ConfigSnapshot, error) {
	c, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	who, _ := ctx.UserValue(tokenNameKey).(string)
	return a.opts.Store.Update(withVersionSink(WithWho(c, who, note), hv), "manual", ifVersion, change)
}

func (a *Admin) result(snap ConfigSnapshot, hv uint64, start time.Time, s *sessionJSON, deleted string) changeResult {
	r := changeResult{Version: snap.Version, HistoryVersion: hv, Session: s, Deleted: deleted, TookMs: float64(time.Since(start)) / float64(time.Millisecond)}
	if p := a.opts.Plan(); p != nil {
		r.PlanCost = p.TotalCost
		if s != nil {
			for _, sp := range p.Sessions {
				if sp.Name == s.Name {
					r.PlanError = sp.Error
				}
			}
		}
	}
	r.Sessions = make([]string, len(snap.Config.Sessions))
	for i, s := range snap.Config.Sessions {
		r.Sessions[i] = s.Name
	}
	return r
}

func (a *Admin) logChange(msg, session string, err error) {
	if a.opts.Logger == nil {
		return
	}
	if err != nil {
		a.opts.Logger.Info(msg, zap.String("session", session), zap.Error(err))
		return
	}
	snap := a.opts.Store.Current()
	a.opts.Logger.Info(msg, zap.String("session", session), zap.Uint64("config_version", snap.Version))
}

func sessionIndex(cfg *api.Config, name string) int {
	for i := range cfg.Sessions {
		if cfg.Sessions[i].Name == name {
			return i
		}
	}
	return -1
}

// ifMatch reads an optional If-Match: "<version>" (the ETag of a GET).
func ifMatch(ctx *fasthttp.RequestCtx) (uint64, error) {
	h := strings.TrimSpace(string(ctx.Request.Header.Peek("If-Match")))
	if h == "" || h == "*" {
		return 0, nil
	}
	v, err := strconv.ParseUint(strings.Trim(strings.TrimPrefix(h, "W/"), `"`), 10, 64)
	if err != nil || v == 0 {
		return 0, &adminError{status: 400, msg: fmt.Sprintf("If-Match %q: want the config version a GET returned as ETag, such as \"3\"", h)}
	}
	return v, nil
}

func (a *Admin) setVersion(ctx *fasthttp.RequestCtx, v uint64) {
	ctx.Response.Header.Set("ETag", `"`+strconv.FormatUint(v, 10)+`"`)
}

// withSession returns cur with session name created or replaced by the one in
// body (YAML or JSON, the config file's fields: name, slo, modules). body is
// parsed and validated together with the rest of cur by the config loader, so
// errors name the body's line and field as they would in a file called docName.
func withSession(cur *api.Config, name string, body []byte, docName string) (*api.Config, error) {
	wrapped, ok := wrapSessionDoc(body)
	if !ok {
		return nil, &adminError{status: 400, msg: fmt.Sprintf("%s: the body is empty: want one session in YAML or JSON, such as {\"name\": %q, \"slo\": \"500ms\", \"modules\": [{\"name\": \"m\", \"model\": \"resnet50\", \"rate\": 10}]}", docName, name)}
	}
	i := sessionIndex(cur, name)
	rest := *cur
	if i >= 0 {
		rest.Sessions = append(append([]api.Session(nil), cur.Sessions[:i]...), cur.Sessions[i+1:]...)
	}
	restYAML, err := api.EncodeYAML(&rest)
	if err != nil {
		return nil, fmt.Errorf("controlplane: write the running config: %w", err)
	}
	loaded, err := api.LoadBytes(api.NamedDoc{Name: "running config", Data: restYAML}, api.NamedDoc{Name: docName, Data: wrapped})
	if err != nil {
		return nil, invalidConfig(err, docName)
	}
	var got []api.Session
	for _, s := range loaded.Sessions {
		if s.Source.File == docName {
			s.Source.Line--
			for j := range s.Modules {
				s.Modules[j].Source.Line--
			}
			got = append(got, s)
		}
	}
	switch {
	case len(got) != 1:
		return nil, &adminError{status: 400, msg: fmt.Sprintf("%s: the body holds %d sessions; want exactly one, a mapping with name, slo and modules", docName, len(got))}
	case got[0].Name != name:
		return nil, &adminError{status: 400, msg: fmt.Sprintf("%s: the body names session %q but the path names %q: they must match (to rename, PUT the new name and DELETE the old)", docName, got[0].Name, name)}
	}
	next := *cur
	next.Sessions = append([]api.Session(nil), cur.Sessions...)
	if i >= 0 {
		next.Sessions[i] = got[0]
	} else {
		next.Sessions = append(next.Sessions, got[0])
	}
	return &next, nil
}

// wrapSessionDoc makes body (one session) the only item of a top-level
// `sessions:` list, keeping every body line n on line n+1. ok is false when the
// body holds nothing but blanks and comments.
func wrapSessionDoc(body []byte) (doc []byte, ok bool) {
	lines := strings.Split(strings.ReplaceAll(string(body), "\r\n", "\n"), "\n")
	var b strings.Builder
	b.WriteString("sessions:\n")
	started := false
	for _, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case !started && (t == "" || strings.HasPrefix(t, "#") || t == "---"):
			b.WriteString("\n") // keep the line count
			continue
		case !started:
			started = true
			b.WriteString("- ")
		default:
			b.WriteString("  ")
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return []byte(b.String()), started
}

// invalidConfig turns the loader's errors into a 400 listing each problem, with
// the lines of docName shifted back to the body's own numbering.
func invalidConfig(err error, docName string) *adminError {
	var problems []string
	var walk func(error)
	walk = func(e error) {
		var ce *api.ConfigError
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		if errors.As(e, &ce) {
			c := *ce
			if c.File == docName && c.Line > 0 {
				c.Line--
			}
			problems = append(problems, c.Error())
			return
		}
		problems = append(problems, e.Error())
	}
	walk(err)
	return &adminError{status: 400, msg: api.ErrInvalidConfig.Error() + ": " + strings.Join(problems, "; "), problems: problems}
}

// fail answers err as {"error": "...", "problems": [...]} with its status:
// adminError's own, 400 for an invalid config, 422 for a change the planner or
// placement refused (ErrRejected), 412 for ErrVersionMismatch, 500 otherwise.
func (a *Admin) fail(ctx *fasthttp.RequestCtx, err error) {
	status := http.StatusInternalServerError
	var ae *adminError
	var problems []string
	switch {
	case errors.As(err, &ae):
		status, problems = ae.status, ae.problems
	case errors.Is(err, ErrVersionMismatch):
		status = http.StatusPreconditionFailed
	case errors.Is(err, ErrRejected):
		status = http.StatusUnprocessableEntity
	case errors.Is(err, api.ErrInvalidConfig):
		ie := invalidConfig(err, "")
		status, problems = 400, ie.problems
	}
	a.writeJSON(ctx, status, struct {
		Error    string   `json:"error"`
		Problems []string `json:"problems,omitempty"`
	}{err.Error(), problems})
}

func (a *Admin) writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status, b = 500, []byte(`{"error":`+strconv.Quote(err.Error())+`}`)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}

func (a *Admin) writeYAML(ctx *fasthttp.RequestCtx, v any) {
	b, err := yaml.Marshal(v)
	if err != nil {
		a.writeJSON(ctx, 500, map[string]string{"error": err.Error()})
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("application/yaml")
	ctx.SetBody(b)
}
