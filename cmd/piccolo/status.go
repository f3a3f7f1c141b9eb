package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/controlplane"
)

// statusOptions are the flags of `piccolo status`.
type statusOptions struct {
	target     string
	window     time.Duration
	timeout    time.Duration
	adminToken string    // bearer token of /admin/; empty: $PICCOLO_ADMIN_TOKEN
	stderr     io.Writer // warnings; nil: os.Stderr
}

func newStatusCmd() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status --target URL [--window D]",
		Short: "Show a gateway's sessions, plan, backends and live SLO attainment",
		Long: `status reads a running gateway and prints, in the terminal:

  the plan: policy, cost (units per hour), age, re-plans by cause, backends by
            hardware type; with Consul, the cluster plan's version and the
            scheduler that published it;
  sessions: SLO, readiness, requests, successes, admission rejections, SLO
            violations, SLO attainment, end-to-end latency p50 and p99;
  modules:  budget and planned WCL, planned request and dummy rates against the
            measured rate, machines by hardware, queue and compute p50, mean
            batch size.

The plan comes from GET /admin/plan (the plan JSON) when the gateway serves it
and accepts the admin token (--admin-token, default $PICCOLO_ADMIN_TOKEN, sent
as Authorization: Bearer), and from the piccolo_plan_* metrics of GET /metrics
otherwise; the first line says which. A gateway that refuses the token (HTTP
401) gets a one-line warning on stderr. With the token, the backends the
gateway serves with come from GET /admin/backends: id, hardware, address, what
the plan placed there, and the membership's source (static or consul) and
whether it is stale. Live figures come
from /metrics: cumulative since the gateway started, or, with --window D, over
the D between two scrapes. Latency percentiles are read from histogram buckets:
"≤256ms" means the bucket that holds the percentile ends at 256 ms.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.stderr = cmd.ErrOrStderr()
			return runStatus(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.target, "target", "http://127.0.0.1:8000", "the gateway's HTTP address (http://host:port or host:port)")
	f.DurationVar(&o.window, "window", 0, "measure live figures over this window between two scrapes (0: since the gateway started)")
	f.DurationVar(&o.timeout, "timeout", 5*time.Second, "timeout of each HTTP request")
	f.StringVar(&o.adminToken, "admin-token", "", "bearer token of the gateway's admin API, for /admin/plan and /admin/backends (default: $PICCOLO_ADMIN_TOKEN)")
	return cmd
}

// statusSnapshot is one scrape of a gateway.
type statusSnapshot struct {
	at   time.Time
	fams map[string]*dto.MetricFamily
}

// adminTokenEnv names the variable holding the admin API's bearer token when
// --admin-token is not given (piccolo gateway and piccolo status).
const adminTokenEnv = "PICCOLO_ADMIN_TOKEN"

// adminToken is flag, or $PICCOLO_ADMIN_TOKEN when flag is empty.
func adminToken(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(adminTokenEnv)
}

// runStatus prints the status of the gateway at o.target to w, and warnings to
// o.stderr. Errors: the target is malformed, or its /metrics cannot be read or
// parsed; the admin API is optional.
func runStatus(ctx context.Context, o *statusOptions, w io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	stderr := o.stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	token := adminToken(o.adminToken)
	base := strings.TrimRight(o.target, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	if u, err := url.Parse(base); err != nil || u.Host == "" {
		return fmt.Errorf("--target %q: want http://host:port or host:port", o.target)
	}
	if o.window < 0 {
		return fmt.Errorf("--window %v: must be ≥ 0", o.window)
	}
	client := &http.Client{Timeout: o.timeout}
	first, err := scrapeGateway(ctx, client, base)
	if err != nil {
		return err
	}
	var from *statusSnapshot
	now := first
	if o.window > 0 {
		select {
		case <-time.After(o.window):
		case <-ctx.Done():
			return ctx.Err()
		}
		if now, err = scrapeGateway(ctx, client, base); err != nil {
			return err
		}
		from = first
	}
	plan, planSource, err := fetchPlan(ctx, client, base, token)
	if err != nil {
		fmt.Fprintf(stderr, "piccolo status: warning: %v; the plan comes from /metrics\n", err)
	}
	var bv *controlplane.BackendView
	if plan != nil { // the token works
		bv = fetchBackends(ctx, client, base, token)
	}
	return writeStatus(ctx, w, client, base, plan, planSource, bv, from, now)
}

func scrapeGateway(ctx context.Context, client *http.Client, base string) (*statusSnapshot, error) {
	body, status, err := httpGet(ctx, client, base+"/metrics")
	if err != nil {
		return nil, fmt.Errorf("read %s/metrics: %w", base, err)
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("read %s/metrics: HTTP %d: is this a piccolo gateway?", base, status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse %s/metrics: %w", base, err)
	}
	return &statusSnapshot{at: time.Now(), fams: fams}, nil
}

func httpGet(ctx context.Context, client *http.Client, u string) ([]byte, int, error) {
	return httpGetAuth(ctx, client, u, "")
}

// httpGetAuth is httpGet with Authorization: Bearer token (none when empty).
func httpGetAuth(ctx context.Context, client *http.Client, u, token string) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return b, resp.StatusCode, err
}

// fetchPlan reads /admin/plan with token; the plan is nil (and its source
// "/metrics") when the gateway does not serve it. err, for a warning, is set
// only when the gateway refused the token (HTTP 401): a gateway without the
// admin API (404) or an older one is no cause for one.
func fetchPlan(ctx context.Context, client *http.Client, base, token string) (*api.Plan, string, error) {
	body, status, err := httpGetAuth(ctx, client, base+"/admin/plan", token)
	if err == nil && status == http.StatusUnauthorized {
		if token == "" {
			return nil, "/metrics", errors.New("the gateway's admin API needs a token: pass --admin-token or set PICCOLO_ADMIN_TOKEN")
		}
		return nil, "/metrics", errors.New("the gateway's admin API refused the token (HTTP 401): check --admin-token or PICCOLO_ADMIN_TOKEN")
	}
	if err != nil || status != http.StatusOK {
		return nil, "/metrics", nil
	}
	var p api.Plan
	if err := json.Unmarshal(body, &p); err != nil || len(p.Sessions) == 0 {
		return nil, "/metrics", nil
	}
	return &p, "/admin/plan", nil
}

// fetchBackends reads /admin/backends with token; nil when it cannot.
func fetchBackends(ctx context.Context, client *http.Client, base, token string) *controlplane.BackendView {
	body, status, err := httpGetAuth(ctx, client, base+"/admin/backends", token)
	if err != nil || status != http.StatusOK {
		return nil
	}
	var v controlplane.BackendView
	if err := json.Unmarshal(body, &v); err != nil {
		return nil
	}
	return &v
}

// writeBackends prints the membership of bv: a heading with its source and
// whether it is stale, then one row a backend.
func writeBackends(w io.Writer, bv *controlplane.BackendView) error {
	src := bv.Source
	if src == "" {
		src = "-"
	}
	head := "backends (from /admin/backends): source " + src
	if bv.Stale {
		head += ", STALE"
		if !bv.At.IsZero() {
			head += " since " + bv.At.UTC().Format(time.RFC3339)
		}
		if bv.Error != "" {
			head += ": " + bv.Error
		}
	}
	fmt.Fprintln(w, head)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tHARDWARE\tADDRESS\tPLACED")
	for _, b := range bv.Backends {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.ID, b.Hardware, b.Address, orNone(b.Placed))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w)
	return err
}

// series is one sample: its labels and value (counter/gauge) or histogram.
type series struct {
	labels map[string]string
	value  float64
	hist   *dto.Histogram
}

func (s *statusSnapshot) series(name string) []series {
	f := s.fams[name]
	if f == nil {
		return nil
	}
	out := make([]series, 0, len(f.GetMetric()))
	for _, m := range f.GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		sr := series{labels: l}
		switch {
		case m.Counter != nil:
			sr.value = m.GetCounter().GetValue()
		case m.Gauge != nil:
			sr.value = m.GetGauge().GetValue()
		case m.Untyped != nil:
			sr.value = m.GetUntyped().GetValue()
		case m.Histogram != nil:
			sr.hist = m.GetHistogram()
			sr.value = float64(sr.hist.GetSampleCount())
		}
		out = append(out, sr)
	}
	return out
}

// sum adds the values of name's series whose labels include want.
func (s *statusSnapshot) sum(name string, want map[string]string) float64 {
	if s == nil {
		return 0
	}
	var v float64
	for _, sr := range s.series(name) {
		if matches(sr.labels, want) {
			v += sr.value
		}
	}
	return v
}

// buckets returns name's histogram buckets (upper bound → cumulative count)
// summed over the series matching want, and their count and sum.
func (s *statusSnapshot) buckets(name string, want map[string]string) (map[float64]float64, float64, float64) {
	b := map[float64]float64{}
	var n, total float64
	if s == nil {
		return b, 0, 0
	}
	for _, sr := range s.series(name) {
		if sr.hist == nil || !matches(sr.labels, want) {
			continue
		}
		for _, bk := range sr.hist.GetBucket() {
			b[bk.GetUpperBound()] += float64(bk.GetCumulativeCount())
		}
		n += float64(sr.hist.GetSampleCount())
		total += sr.hist.GetSampleSum()
	}
	return b, n, total
}

func matches(l, want map[string]string) bool {
	for k, v := range want {
		if l[k] != v {
			return false
		}
	}
	return true
}

// delta is now's value minus from's (from nil: now's).
func delta(from, now *statusSnapshot, name string, want map[string]string) float64 {
	return now.sum(name, want) - from.sum(name, want)
}

// quantileBucket returns the upper bound of the bucket holding quantile q of
// the observations between from and now; NaN when there are none.
func quantileBucket(from, now *statusSnapshot, name string, want map[string]string, q float64) float64 {
	nb, nn, _ := now.buckets(name, want)
	fb, fn, _ := from.buckets(name, want)
	n := nn - fn
	if n <= 0 {
		return math.NaN()
	}
	bounds := make([]float64, 0, len(nb))
	for ub := range nb {
		bounds = append(bounds, ub)
	}
	sort.Float64s(bounds)
	rank := math.Ceil(q * n)
	for _, ub := range bounds {
		if nb[ub]-fb[ub] >= rank {
			return ub
		}
	}
	return math.Inf(1)
}

func fmtBucket(sec float64) string {
	switch {
	case math.IsNaN(sec):
		return "-"
	case math.IsInf(sec, 1):
		return ">max"
	}
	return "≤" + fmtDur(sec)
}

func fmtDur(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.String()
}

// statusModule is one module row: from the plan JSON or the plan metrics.
type statusModule struct {
	session, name string
	budget, wcl   float64            // s
	rate, dummy   float64            // req/s
	machines      map[string]float64 // hardware -> machines
}

func modulesOf(plan *api.Plan, now *statusSnapshot) (sessions []string, slo map[string]float64, mods []statusModule) {
	slo = map[string]float64{}
	if plan != nil {
		for _, sp := range plan.Sessions {
			sessions = append(sessions, sp.Name)
			slo[sp.Name] = sp.SLOMs / 1000
			for _, mp := range sp.Modules {
				m := statusModule{session: sp.Name, name: mp.Name, budget: mp.BudgetMs / 1000, wcl: mp.WCLMs / 1000,
					rate: mp.Rate, dummy: mp.DummyRate, machines: map[string]float64{}}
				for _, g := range mp.Configs {
					m.machines[g.Hardware] += g.Machines
				}
				mods = append(mods, m)
			}
		}
		return sessions, slo, mods
	}
	for _, sr := range now.series("piccolo_plan_session_slo_seconds") {
		sessions = append(sessions, sr.labels["session"])
		slo[sr.labels["session"]] = sr.value
	}
	if len(sessions) == 0 { // an older gateway: sessions from the request counters
		seen := map[string]bool{}
		for _, sr := range now.series("piccolo_gateway_requests_total") {
			if s := sr.labels["session"]; s != "" && !seen[s] {
				seen[s] = true
				sessions = append(sessions, s)
			}
		}
	}
	sort.Strings(sessions)
	byKey := map[[2]string]*statusModule{}
	get := func(l map[string]string) *statusModule {
		k := [2]string{l["session"], l["module"]}
		if m := byKey[k]; m != nil {
			return m
		}
		m := &statusModule{session: k[0], name: k[1], machines: map[string]float64{}}
		byKey[k] = m
		return m
	}
	for _, sr := range now.series("piccolo_plan_module_budget_seconds") {
		get(sr.labels).budget = sr.value
	}
	for _, sr := range now.series("piccolo_plan_module_wcl_seconds") {
		get(sr.labels).wcl = sr.value
	}
	for _, sr := range now.series("piccolo_plan_module_rate") {
		if sr.labels["kind"] == "dummy" {
			get(sr.labels).dummy = sr.value
		} else {
			get(sr.labels).rate = sr.value
		}
	}
	for _, sr := range now.series("piccolo_plan_machines") {
		get(sr.labels).machines[sr.labels["hardware"]] += sr.value
	}
	for _, sr := range now.series("piccolo_dispatcher_items_total") {
		get(sr.labels)
	}
	for _, m := range byKey {
		mods = append(mods, *m)
	}
	sort.Slice(mods, func(i, j int) bool {
		return mods[i].session < mods[j].session || mods[i].session == mods[j].session && mods[i].name < mods[j].name
	})
	return sessions, slo, mods
}

func writeStatus(ctx context.Context, w io.Writer, client *http.Client, base string, plan *api.Plan, planSource string,
	bv *controlplane.BackendView, from, now *statusSnapshot) error {
	span := "since start"
	elapsed := 0.0
	if from != nil {
		elapsed = now.at.Sub(from.at).Seconds()
		span = "over the last " + now.at.Sub(from.at).Round(time.Millisecond).String()
	} else if st := now.sum("process_start_time_seconds", nil); st > 0 {
		elapsed = float64(now.at.UnixNano())/1e9 - st
	}
	fmt.Fprintf(w, "piccolo status  %s  (live figures %s)\n", base, span)
	cost := now.sum("piccolo_plan_cost", nil)
	policy := ""
	if plan != nil {
		cost, policy = plan.TotalCost, " policy "+plan.Policy+","
	}
	age := now.sum("piccolo_plan_age_seconds", nil)
	var causes []string
	for _, sr := range now.series("piccolo_plan_replans_total") {
		if sr.value > 0 {
			causes = append(causes, fmt.Sprintf("%s %.0f", sr.labels["cause"], sr.value))
		}
	}
	sort.Strings(causes)
	fmt.Fprintf(w, "plan (from %s):%s cost %.2f/h, age %s, re-plans: %s\n", planSource, policy, cost, fmtDur(age), orNone(causes))
	if sched := now.series("piccolo_plan_scheduler_info"); len(sched) > 0 {
		here := ""
		if now.sum("piccolo_scheduler_leader", nil) == 1 {
			here = "; this gateway is the elected scheduler"
		}
		fmt.Fprintf(w, "cluster plan: version %.0f, published by scheduler %s%s\n",
			now.sum("piccolo_plan_version", nil), sched[0].labels["scheduler"], here)
	}
	var hw []string
	for _, sr := range now.series("piccolo_membership_backends") {
		hw = append(hw, fmt.Sprintf("%s %.0f", sr.labels["hardware"], sr.value))
	}
	sort.Strings(hw)
	fmt.Fprintf(w, "backends: %s\n\n", orNone(hw))
	if bv != nil {
		if err := writeBackends(w, bv); err != nil {
			return err
		}
	}

	sessions, slo, mods := modulesOf(plan, now)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tSLO\tREADY\tREQUESTS\tOK\tREJECTED\tVIOLATIONS\tATTAINMENT\tP50\tP99")
	for _, s := range sessions {
		l := map[string]string{"session": s}
		req := delta(from, now, "piccolo_gateway_requests_total", l)
		ok := delta(from, now, "piccolo_gateway_requests_total", map[string]string{"session": s, "code": "200"})
		var clientErr float64
		for _, c := range []string{"400", "404", "405", "413", "499"} {
			clientErr += delta(from, now, "piccolo_gateway_requests_total", map[string]string{"session": s, "code": c})
		}
		rej := delta(from, now, "piccolo_gateway_admission_rejections_total", l)
		viol := delta(from, now, "piccolo_gateway_slo_violations_total", l)
		att := "-"
		if n := req - clientErr; n > 0 {
			att = fmt.Sprintf("%.1f%%", 100*(n-viol)/n)
		}
		ready := "?"
		if _, code, err := httpGet(ctx, client, base+"/v2/models/"+url.PathEscape(s)+"/ready"); err == nil {
			ready = map[bool]string{true: "yes", false: "no"}[code == http.StatusOK]
		}
		sloText := "-"
		if slo[s] > 0 {
			sloText = fmtDur(slo[s])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\n", s, sloText, ready, req, ok, rej, viol, att,
			fmtBucket(quantileBucket(from, now, "piccolo_gateway_request_seconds", l, 0.5)),
			fmtBucket(quantileBucket(from, now, "piccolo_gateway_request_seconds", l, 0.99)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tMODULE\tBUDGET\tWCL\tPLANNED REQ/S\tDUMMY/S\tMEASURED REQ/S\tMACHINES\tQUEUE P50\tCOMPUTE P50\tMEAN BATCH")
	for _, m := range mods {
		l := map[string]string{"session": m.session, "module": m.name}
		measured := "-"
		if elapsed > 0 {
			sub := delta(from, now, "piccolo_dispatcher_items_total", map[string]string{"session": m.session, "module": m.name, "outcome": "submitted"})
			measured = fmt.Sprintf("%.1f", sub/elapsed)
		}
		batches := delta(from, now, "piccolo_gateway_batch_size", l)
		_, _, nowSum := now.buckets("piccolo_gateway_batch_size", l)
		_, _, fromSum := from.buckets("piccolo_gateway_batch_size", l)
		meanBatch := "-"
		if batches > 0 {
			meanBatch = fmt.Sprintf("%.1f", (nowSum-fromSum)/batches)
		}
		var mach []string
		for h, n := range m.machines {
			mach = append(mach, fmt.Sprintf("%s×%.2g", h, n))
		}
		sort.Strings(mach)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\n", m.session, m.name, fmtDur(m.budget), fmtDur(m.wcl),
			m.rate, m.dummy, measured, orNone(mach),
			fmtBucket(quantileBucket(from, now, "piccolo_gateway_module_queue_seconds", l, 0.5)),
			fmtBucket(quantileBucket(from, now, "piccolo_gateway_module_compute_seconds", l, 0.5)), meanBatch)
	}
	return tw.Flush()
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
