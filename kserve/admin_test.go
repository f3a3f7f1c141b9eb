package kserve

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"github.com/piccolo-serving/piccolo/metrics"
)

// TestAdminApart: with AdminApart the client port answers inference, health
// and metadata, and 404 for /admin/, /metrics and pprof; the admin
// listener serves those three and nothing of the client's.
func TestAdminApart(t *testing.T) {
	exec, err := gateway.NewDAGRunner(gatewaytest.NewFakeRunner(), gatewaytest.SessionsFromYAML(t, serverSessions))
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	admin := func(ctx *fasthttp.RequestCtx) { ctx.SetStatusCode(200); ctx.SetBodyString("admin") }
	srv, err := NewServer(exec, ServerOptions{Version: "test", Metrics: m, Admin: admin, AdminApart: true})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(s *fasthttp.Server) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve(l)
		t.Cleanup(func() { _ = s.Shutdown() })
		return "http://" + l.Addr().String()
	}
	client, adm := serve(srv.NewHTTPServer()), serve(srv.NewAdminHTTPServer())
	get := func(url string) int {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		base, path string
		want       int
	}{
		{client, "/v2/health/ready", 200},
		{client, "/v2/models/echo", 200},
		{client, "/metrics", 404},
		{client, "/admin/plan", 404},
		{client, "/debug/pprof/heap", 404},
		{adm, "/metrics", 200},
		{adm, "/admin/plan", 200},
		{adm, "/debug/pprof/heap", 200},
		{adm, "/v2/health/ready", 404},
	} {
		if got := get(tc.base + tc.path); got != tc.want {
			which := "client port"
			if tc.base == adm {
				which = "admin listener"
			}
			t.Errorf("GET %s on the %s: %d; want %d", tc.path, which, got, tc.want)
		}
	}
	if code, _, body := post(t, client+"/v2/models/echo/infer", []byte(goodBody)); code != 200 || !strings.Contains(string(body), "output") {
		t.Errorf("infer on the client port: %d %s", code, body)
	}
}
