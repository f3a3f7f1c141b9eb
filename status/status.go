package status

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

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/metrics"
)

// snapshot is one scrape of a gateway.
type snapshot struct {
	at   time.Time
	fams map[string]*dto.MetricFamily
}

// Options say which gateway to read and how.
type Options struct {
	Target     string        // the gateway's HTTP address: http://host:port or host:port
	Window     time.Duration // live figures over this window between two scrapes; 0: since the gateway started
	Timeout    time.Duration // of each HTTP request
	AdminToken string        // bearer token of /admin/; empty: read the plan from /metrics
	Stderr     io.Writer     // warnings; nil: os.Stderr
}

// Run prints the status of the gateway at o.Target to w, and warnings to
// o.Stderr. Errors: the target is malformed, or its /metrics cannot be read or
// parsed; the admin API is optional.
func Run(ctx context.Context, o Options, w io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	stderr := o.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	token := o.AdminToken
	base := strings.TrimRight(o.Target, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	if u, err := url.Parse(base); err != nil || u.Host == "" {
		return fmt.Errorf("--target %q: want http://host:port or host:port", o.Target)
	}
	if o.Window < 0 {
		return fmt.Errorf("--window %v: must be ≥ 0", o.Window)
	}
	client := &http.Client{Timeout: o.Timeout}
	first, err := scrapeGateway(ctx, client, base)
	if err != nil {
		return err
	}
	var from *snapshot
	now := first
	if o.Window > 0 {
		select {
		case <-time.After(o.Window):
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
	var bv *api.BackendView
	if plan != nil { // the token works
		bv = fetchBackends(ctx, client, base, token)
	}
	return writeStatus(ctx, w, client, base, plan, planSource, bv, from, now)
}

func scrapeGateway(ctx context.Context, client *http.Client, base string) (*snapshot, error) {
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
	return &snapshot{at: time.Now(), fams: fams}, nil
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
func fetchBackends(ctx context.Context, client *http.Client, base, token string) *api.BackendView {
	body, status, err := httpGetAuth(ctx, client, base+"/admin/backends", token)
	if err != nil || status != http.StatusOK {
		return nil
	}
	var v api.BackendView
	if err := json.Unmarshal(body, &v); err != nil {
		return nil
	}
	return &v
}

// writeBackends prints the membership of bv: a heading with its source and
// whether it is stale, then one row a backend.
func writeBackends(w io.Writer, bv *api.BackendView) error {
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

func (s *snapshot) series(name string) []series {
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
func (s *snapshot) sum(name string, want map[string]string) float64 {
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
func (s *snapshot) buckets(name string, want map[string]string) (map[float64]float64, float64, float64) {
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

// delta is now's value minus from's (from nil: now's). A counter that went
// down was reset (a plan switch replaces a module's dispatcher, and its
// counters start again from zero): its increase is now's value, as
// Prometheus's rate() takes it.
func delta(from, now *snapshot, name string, want map[string]string) float64 {
	n, f := now.sum(name, want), from.sum(name, want)
	if n < f {
		return n
	}
	return n - f
}

// quantileBucket returns the upper bound of the bucket holding quantile q of
// the observations between from and now; NaN when there are none.
func quantileBucket(from, now *snapshot, name string, want map[string]string, q float64) float64 {
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

// module is one module row: from the plan JSON or the plan metrics.
type module struct {
	session, name string
	budget, wcl   float64            // s
	rate, dummy   float64            // req/s
	machines      map[string]float64 // hardware -> machines
}

func modulesOf(plan *api.Plan, now *snapshot) (sessions []string, slo map[string]float64, mods []module) {
	slo = map[string]float64{}
	if plan != nil {
		for _, sp := range plan.Sessions {
			sessions = append(sessions, sp.Name)
			slo[sp.Name] = sp.SLOMs / 1000
			for _, mp := range sp.Modules {
				m := module{session: sp.Name, name: mp.Name, budget: mp.BudgetMs / 1000, wcl: mp.WCLMs / 1000,
					rate: mp.Rate, dummy: mp.DummyRate, machines: map[string]float64{}}
				for _, g := range mp.Configs {
					m.machines[g.Hardware] += g.Machines
				}
				mods = append(mods, m)
			}
		}
		return sessions, slo, mods
	}
	for _, sr := range now.series(metrics.PlanSessionSLOSeconds) {
		sessions = append(sessions, sr.labels["session"])
		slo[sr.labels["session"]] = sr.value
	}
	if len(sessions) == 0 { // an older gateway: sessions from the request counters
		seen := map[string]bool{}
		for _, sr := range now.series(metrics.GatewayRequestsTotal) {
			if s := sr.labels["session"]; s != "" && !seen[s] {
				seen[s] = true
				sessions = append(sessions, s)
			}
		}
	}
	sort.Strings(sessions)
	byKey := map[[2]string]*module{}
	get := func(l map[string]string) *module {
		k := [2]string{l["session"], l["module"]}
		if m := byKey[k]; m != nil {
			return m
		}
		m := &module{session: k[0], name: k[1], machines: map[string]float64{}}
		byKey[k] = m
		return m
	}
	for _, sr := range now.series(metrics.PlanModuleBudgetSeconds) {
		get(sr.labels).budget = sr.value
	}
	for _, sr := range now.series(metrics.PlanModuleWCLSeconds) {
		get(sr.labels).wcl = sr.value
	}
	for _, sr := range now.series(metrics.PlanModuleRate) {
		if sr.labels["kind"] == "dummy" {
			get(sr.labels).dummy = sr.value
		} else {
			get(sr.labels).rate = sr.value
		}
	}
	for _, sr := range now.series(metrics.PlanMachines) {
		get(sr.labels).machines[sr.labels["hardware"]] += sr.value
	}
	for _, sr := range now.series(metrics.DispatcherItemsTotal) {
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
	bv *api.BackendView, from, now *snapshot) error {
	span := "since start"
	elapsed := 0.0
	if from != nil {
		elapsed = now.at.Sub(from.at).Seconds()
		span = "over the last " + now.at.Sub(from.at).Round(time.Millisecond).String()
	} else if st := now.sum(metrics.ProcessStartTimeSeconds, nil); st > 0 {
		elapsed = float64(now.at.UnixNano())/1e9 - st
	}
	fmt.Fprintf(w, "piccolo status  %s  (live figures %s)\n", base, span)
	cost := now.sum(metrics.PlanCost, nil)
	policy := ""
	if plan != nil {
		cost, policy = plan.TotalCost, " policy "+plan.Policy+","
	}
	age := now.sum(metrics.PlanAgeSeconds, nil)
	var causes []string
	for _, sr := range now.series(metrics.PlanReplansTotal) {
		if sr.value > 0 {
			causes = append(causes, fmt.Sprintf("%s %.0f", sr.labels["cause"], sr.value))
		}
	}
	sort.Strings(causes)
	fmt.Fprintf(w, "plan (from %s):%s cost %.2f/h, age %s, re-plans: %s\n", planSource, policy, cost, fmtDur(age), orNone(causes))
	if sched := now.series(metrics.PlanSchedulerInfo); len(sched) > 0 {
		here := ""
		if now.sum(metrics.ReplannerLeader, nil) == 1 || now.sum(metrics.SchedulerLeader, nil) == 1 {
			here = "; this gateway is the elected scheduler"
		}
		fmt.Fprintf(w, "cluster plan: version %.0f, published by scheduler %s%s\n",
			now.sum(metrics.PlanVersion, nil), sched[0].labels["scheduler"], here)
	}
	var hw []string
	for _, sr := range now.series(metrics.MembershipBackends) {
		hw = append(hw, fmt.Sprintf("%s %.0f", sr.labels["hardware"], sr.value))
	}
	sort.Strings(hw)
	fmt.Fprintf(w, "backends: %s\n", orNone(hw))
	// What the plan asks of the cluster: desired vs available machines per
	// hardware type, and what an autoscaler should add.
	var capText []string
	for _, sr := range now.series(metrics.CapacityDesiredMachines) {
		h := sr.labels["hardware"]
		avail := now.sum(metrics.CapacityAvailableMachines, map[string]string{"hardware": h})
		c := fmt.Sprintf("%s %.0f of %.0f", h, sr.value, avail)
		if sr.value > avail {
			c += fmt.Sprintf(" (%.0f short)", sr.value-avail)
		}
		capText = append(capText, c)
	}
	sort.Strings(capText)
	fmt.Fprintf(w, "capacity desired of available: %s\n\n", orNone(capText))
	writeHealth(w, from, now)
	writeCalibration(w, now)
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
		req := delta(from, now, metrics.GatewayRequestsTotal, l)
		ok := delta(from, now, metrics.GatewayRequestsTotal, map[string]string{"session": s, "code": "200"})
		var clientErr float64
		for _, c := range []string{"400", "404", "405", "413", "499"} {
			clientErr += delta(from, now, metrics.GatewayRequestsTotal, map[string]string{"session": s, "code": c})
		}
		rej := delta(from, now, metrics.GatewayAdmissionRejectionsTotal, l)
		viol := delta(from, now, metrics.GatewaySLOViolationsTotal, l)
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
			fmtBucket(quantileBucket(from, now, metrics.GatewayRequestSeconds, l, 0.5)),
			fmtBucket(quantileBucket(from, now, metrics.GatewayRequestSeconds, l, 0.99)))
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
			sub := delta(from, now, metrics.DispatcherItemsTotal, map[string]string{"session": m.session, "module": m.name, "outcome": "submitted"})
			measured = fmt.Sprintf("%.1f", sub/elapsed)
		}
		batches := delta(from, now, metrics.GatewayBatchSize, l)
		_, _, nowSum := now.buckets(metrics.GatewayBatchSize, l)
		_, _, fromSum := from.buckets(metrics.GatewayBatchSize, l)
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
			fmtBucket(quantileBucket(from, now, metrics.GatewayModuleQueueSeconds, l, 0.5)),
			fmtBucket(quantileBucket(from, now, metrics.GatewayModuleComputeSeconds, l, 0.5)), meanBatch)
	}
	return tw.Flush()
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
