package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestLiveViewInChromium loads the gateway's live view (/admin/view/) in
// headless Chromium (Debian's package, installed by scripts/tools.sh) over
// loopback: with the admin token in the URL's fragment the page shows the
// session's figures, which match the gateway's /metrics, and follows new
// requests without a reload; without the token, or with a wrong one, it
// shows no figure and asks for the token.
func TestLiveViewInChromium(t *testing.T) {
	chromium := interopTool(t, "chromium", "chromium")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const token = "view-test-token"
	url := startSimGateway(t, ctx, detSessionConfig, func(_ *backendOptions, o *gatewayOptions) {
		o.adminToken, o.adminListen, o.maxUtil = token, "same", 0.8
	}).url
	send := func(n int) {
		body := `{"inputs":[{"name":"input0","shape":[1,2],"datatype":"FP32","data":[1,2]}]}`
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
	}
	send(6)

	// Root runs Chromium here (tests, CI): its sandbox needs a user namespace.
	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1400, 1000))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	tctx, tcancel := context.WithTimeout(bctx, 90*time.Second)
	defer tcancel()

	// value reads a figure's raw value (data-v) once the page shows want
	// there (want "": any number).
	stat := func(k string) string { return fmt.Sprintf(`.stats[data-session="s"] [data-k=%q]`, k) }
	waitFor := func(ctx context.Context, sel, want string) string {
		t.Helper()
		js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e && e.dataset.v !== undefined && e.dataset.v !== "" && (%q === "" || e.dataset.v === %q) ? e.dataset.v : false; })()`, sel, want, want)
		v, err := chromedp.Run(ctx, chromedp.Poll[string](js, chromedp.WithPollingInterval(100*time.Millisecond)))
		if err != nil {
			html, _ := chromedp.Run(bctx, chromedp.OuterHTML("body"))
			t.Fatalf("the page never showed %s = %q: %v\n%s", sel, want, err, html)
		}
		return v
	}
	if err := chromedp.Do(tctx, chromedp.Navigate(url+"/admin/view/#token="+token)); err != nil {
		t.Fatal(err)
	}
	waitFor(tctx, stat("requests"), "6")
	scrape := func() map[string]float64 {
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for name, f := range fams {
			for _, m := range f.GetMetric() {
				key := name
				for _, l := range m.GetLabel() {
					key += "," + l.GetName() + "=" + l.GetValue()
				}
				got[key] = m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
			}
		}
		return got
	}
	m := scrape()
	for _, c := range []struct {
		sel  string
		want float64
	}{
		{stat("requests"), m["piccolo_gateway_requests_total,code=200,protocol=http,session=s"]},
		{stat("ok"), m["piccolo_gateway_requests_total,code=200,protocol=http,session=s"]},
		{stat("violations"), m["piccolo_gateway_slo_violations_total,session=s"]},
		{stat("rejected"), m["piccolo_gateway_admission_rejections_total,session=s"]},
		{stat("planned_rate"), m["piccolo_plan_module_rate,kind=request,module=d,session=s"]},
		{`td[data-session="s"][data-module="d"][data-k="planned_rate"]`, m["piccolo_plan_module_rate,kind=request,module=d,session=s"]},
		{`td[data-session="s"][data-module="d"][data-k="dummy_rate"]`, m["piccolo_plan_module_rate,kind=dummy,module=d,session=s"]},
		{`[data-k="plan_cost"]`, m["piccolo_plan_cost"]},
	} {
		got, err := strconv.ParseFloat(waitFor(tctx, c.sel, ""), 64)
		if err != nil || got != c.want {
			t.Errorf("the page shows %s = %v (%v); /metrics says %v", c.sel, got, err, c.want)
		}
	}
	if m["piccolo_gateway_requests_total,code=200,protocol=http,session=s"] != 6 {
		t.Errorf("/metrics counts %v requests of s, want 6", m["piccolo_gateway_requests_total,code=200,protocol=http,session=s"])
	}
	// Live: more requests show up without a reload.
	send(3)
	waitFor(tctx, stat("requests"), "9")
	waitFor(tctx, `td[data-session="s"][data-module="d"][data-k="mean_batch"]`, "")
	if n, err := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll('#history tr[data-version="1"]').length`)); err != nil || n != 1 {
		t.Errorf("the plan history shows no version 1: %d rows, %v", n, err)
	}
	if msg, err := chromedp.Run(tctx, chromedp.Evaluate[string](`document.querySelector("#error").textContent`)); err != nil || msg != "" {
		t.Errorf("the page reports a failed poll: %q %v", msg, err)
	}

	// Refused: a new tab has no token (sessionStorage is per tab).
	for _, c := range []struct{ name, url, want string }{
		{"no token", url + "/admin/view/", ""},
		{"wrong token", url + "/admin/view/#token=wrong", "401"},
	} {
		nctx, ncancel := chromedp.NewContext(bctx)
		nctx, ncancel2 := context.WithTimeout(nctx, 30*time.Second)
		err := chromedp.Do(nctx, chromedp.Navigate(c.url), chromedp.WaitVisible("#login"))
		var refused string
		var figures int
		if err == nil {
			refused, err = chromedp.Run(nctx, chromedp.Evaluate[string](`document.querySelector("#refused").textContent`))
		}
		if err == nil {
			figures, err = chromedp.Run(nctx, chromedp.Evaluate[int](`document.querySelectorAll("[data-k=requests]").length + (document.querySelector("#main").hidden ? 0 : 100)`))
		}
		ncancel2()
		ncancel()
		if err != nil || figures != 0 || !strings.Contains(refused, c.want) {
			t.Errorf("%s: err %v, %d figures shown, refusal %q; want the login form, no figure, a refusal naming %q", c.name, err, figures, refused, c.want)
		}
	}
}
