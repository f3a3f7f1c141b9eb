package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// getMetrics reads url and checks it as `promtool check metrics` does (promlint).
func getMetrics(t *testing.T, url string) string {
	t.Helper()
	var text []byte
	for i := 0; ; i++ {
		resp, err := http.Get(url)
		if err == nil {
			text, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err == nil {
			break
		}
		if i == 50 {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	problems, err := promlint.New(bytes.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("promlint %s: %v", url, err)
	}
	for _, p := range problems {
		t.Errorf("promlint %s: %s: %s", url, p.Metric, p.Text)
	}
	return string(text)
}

// detSessionConfig is one v100 profile of model det (5 ms at batch 1, 8 ms at
// batch 4) and session s (SLO 500 ms, module d at 20 req/s): the config of the
// observability and status tests.
const detSessionConfig = `
hardware:
  - {name: v100, price: 3}
profiles:
  - model: det
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 5ms}
      - {batch: 4, concurrency: 1, duration: 8ms}
sessions:
  - name: s
    slo: 500ms
    modules:
      - {name: d, model: det, rate: 20}
`

// TestObservability boots a backend (metrics on, NVML on: this machine has no
// GPU, so it must say so and carry on) and a gateway, sends requests, checks
// both processes' /metrics with promlint, and reads the gateway with
// `piccolo status`.
func TestObservability(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	metricsAddr := freeAddr(t)
	url := startSimGateway(t, ctx, detSessionConfig, func(bo *backendOptions, o *gatewayOptions) {
		bo.drain, bo.metrics, bo.gpu = 5*time.Second, metricsAddr, true
		o.drain, o.maxUtil = 5*time.Second, 0.8
	}).url
	body := `{"inputs":[{"name":"input0","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`
	const n = 5
	for range n {
		resp, err := http.Post(url+"/v2/models/s/infer", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("infer: HTTP %d", resp.StatusCode)
		}
	}

	btext := getMetrics(t, "http://"+metricsAddr+"/metrics")
	if !strings.Contains(btext, `piccolo_backend_items_total{model="det"} 5`) {
		t.Errorf("backend /metrics lacks 5 items of det:\n%s", grepLines(btext, "piccolo_backend_"))
	}
	if strings.Contains(btext, "piccolo_gpu_") {
		t.Errorf("backend without a GPU exports GPU metrics:\n%s", grepLines(btext, "piccolo_gpu_"))
	}
	gtext := getMetrics(t, url+"/metrics")
	for _, want := range []string{
		`piccolo_gateway_requests_total{code="200",protocol="http",session="s"} 5`,
		`piccolo_plan_replans_total{cause="initial"} 1`,
		`piccolo_membership_backends{hardware="v100"} 1`,
		`piccolo_gateway_module_compute_seconds_count{module="d",session="s"} 5`,
	} {
		if !strings.Contains(gtext, want) {
			t.Errorf("gateway /metrics lacks %s", want)
		}
	}

	checkDashboard(t, gtext, btext)

	var out bytes.Buffer
	if err := runStatus(ctx, &statusOptions{target: url, timeout: 5 * time.Second}, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("piccolo status:\n%s", out.String())
	for _, re := range []string{
		`plan \(from /metrics\): cost 0\.15/h, age [^,]+, re-plans: initial 1`,
		`backends: v100 1`,
		`capacity desired of available: v100 1 of 1\n`,
		`(?m)^s +500ms +yes +5 +5 +0 +0 +100\.0% +≤\S+ +≤\S+$`,
		`(?m)^s +d +\S+ +\S+ +20\.0 +0\.0 +\d+\.\d +v100×0\.05 +≤\S+ +≤\S+ +\d`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("status output does not match %s", re)
		}
	}
	var win bytes.Buffer
	if err := runStatus(ctx, &statusOptions{target: strings.TrimPrefix(url, "http://"), window: 200 * time.Millisecond, timeout: 5 * time.Second}, &win); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^s +500ms +yes +0 +0 +0 +0 +- +- +-$`).MatchString(win.String()) {
		t.Errorf("status over an idle window:\n%s\nwant zero requests and no attainment", win.String())
	}
	if err := runStatus(ctx, &statusOptions{target: "http://" + freeAddr(t), timeout: time.Second}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "/metrics") {
		t.Errorf("status of nothing = %v, want an error naming /metrics", err)
	}
}

// checkDashboard checks configs/grafana/piccolo.json against exported, the
// /metrics texts of a live gateway and backend after traffic: every panel
// (rows' nested panels too) has a query; every query, and the session
// variable's label_values, parses as PromQL (Prometheus's own parser, after
// Grafana's variables are replaced as Grafana would); every metric a query
// selects is in exported (a histogram's _bucket, _sum and _count too), and
// every label a selector matches on is one that metric carries. piccolo_gpu_*
// only exist with a GPU: those are checked by name.
func checkDashboard(t *testing.T, exported ...string) {
	t.Helper()
	raw, err := os.ReadFile("../../configs/grafana/piccolo.json")
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"` // a row's, when collapsed
	}
	var dash struct {
		Title      string            `json:"title"`
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("configs/grafana/piccolo.json: %v", err)
	}
	labelsOf := map[string]map[string]bool{} // series name → label names
	for _, text := range exported {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(text))
		if err != nil {
			t.Fatalf("parse the exported metrics: %v", err)
		}
		for name, f := range fams {
			names := []string{name}
			if f.GetType() == dto.MetricType_HISTOGRAM {
				names = append(names, name+"_bucket", name+"_sum", name+"_count")
			}
			for _, n := range names {
				ls := map[string]bool{}
				for _, m := range f.GetMetric() {
					for _, l := range m.GetLabel() {
						ls[l.GetName()] = true
					}
				}
				if n == name+"_bucket" {
					ls["le"] = true
				}
				labelsOf[n] = ls
			}
		}
	}
	gpu := map[string]bool{"piccolo_gpu_utilization_ratio": true, "piccolo_gpu_power_watts": true, "piccolo_gpu_memory_used_bytes": true,
		"piccolo_gpu_memory_total_bytes": true, "piccolo_gpu_memory_utilization_ratio": true, "piccolo_gpu_info": true}
	// Grafana's variables, as Grafana substitutes them before the query
	// reaches Prometheus ($session is a multi-value regex).
	grafana := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "${session}", ".+", "$session", ".+")
	promql := parser.NewParser(parser.Options{})
	check := func(where, expr string) {
		e, err := promql.ParseExpr(grafana.Replace(expr))
		if err != nil {
			t.Errorf("%s: %q is not PromQL: %v", where, expr, err)
			return
		}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			if gpu[vs.Name] {
				return nil
			}
			ls, ok := labelsOf[vs.Name]
			if !ok {
				t.Errorf("%s queries %s, which no process exports", where, vs.Name)
				return nil
			}
			for _, m := range vs.LabelMatchers {
				if m.Name != "__name__" && !ls[m.Name] {
					t.Errorf("%s matches label %q of %s, which has none (labels: %v)", where, m.Name, vs.Name, slices.Sorted(maps.Keys(ls)))
				}
			}
			return nil
		})
	}
	queries := 0
	var walk func(raw []json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var pn panel
			if err := json.Unmarshal(r, &pn); err != nil {
				t.Fatalf("a panel: %v", err)
			}
			if pn.Type == "row" {
				walk(pn.Panels)
				continue
			}
			if len(pn.Targets) == 0 {
				t.Errorf("panel %q has no query", pn.Title)
			}
			for i, tg := range pn.Targets {
				queries++
				check(fmt.Sprintf("panel %q query %d", pn.Title, i+1), tg.Expr)
			}
		}
	}
	walk(dash.Panels)
	if dash.Title == "" || queries < 8 {
		t.Fatalf("dashboard %q has %d queries", dash.Title, queries)
	}
	labelValues := regexp.MustCompile(`^label_values\((.+), *(\w+)\)$`)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(SELECTOR, LABEL)", v.Name, v.Definition)
			continue
		}
		check("variable "+v.Name, m[1])
		if sel := strings.TrimSpace(m[1]); labelsOf[sel] != nil && !labelsOf[sel][m[2]] {
			t.Errorf("variable %s: %s has no label %s", v.Name, sel, m[2])
		}
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestBackendWithoutHardwareOrGPU(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(cfgPath, []byte("hardware:\n  - {name: v100, price: 3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := runBackend(context.Background(), &backendOptions{files: []string{cfgPath}, executor: "sim", logFmt: "json", gpu: true}, nil)
	if err == nil || !strings.Contains(err.Error(), "--hardware is required") || !strings.Contains(err.Error(), "no NVIDIA GPU") {
		t.Errorf("runBackend without --hardware on a GPU-less machine = %v, want it to ask for --hardware and say there is no GPU", err)
	}
}
