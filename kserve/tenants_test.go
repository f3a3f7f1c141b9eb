package kserve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/tenants"
)

func keyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// tenantsFile: "free" has no limits and may ask for high; "slowpoke" one
// request per 1,000 s; "single" one request at a time, normal at most.
func tenantsFile() string {
	return fmt.Sprintf(`tenants:
  - {name: free, keys: [%s], max_priority: high}
  - {name: slowpoke, keys: [%s], rate: 0.001}
  - {name: single, keys: [%s], concurrency: 1}
`, keyHash("free-key"), keyHash("slow-key"), keyHash("single-key"))
}

func startTenantServers(t *testing.T) (*testServers, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	tt, err := tenants.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	f, err := tenants.Parse([]byte(tenantsFile()))
	if err != nil {
		t.Fatal(err)
	}
	tt.Set(f)
	return startServersWith(t, ServerOptions{MaxBodyBytes: 4096, Version: "test", Tenants: tt}), reg
}

func postKey(t *testing.T, url, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func refused(t *testing.T, reg *prometheus.Registry, tenant, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != metrics.GatewayTenantRefusedTotal {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["tenant"] == tenant && l["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestTenantsHTTP: over real HTTP, a model route without a key or with an
// unknown one (or one in another scheme than Bearer: no key) is 401 with
// WWW-Authenticate (health is not); a key in
// Authorization (any case of Bearer) or X-API-Key is its tenant; a tenant
// over its rate or concurrency is 429 with Retry-After, one asking above its
// priority class 403; each refusal counted by tenant and reason.
func TestTenantsHTTP(t *testing.T) {
	ts, reg := startTenantServers(t)
	infer := ts.url + "/v2/models/echo/infer"
	withPriority := func(p int) string {
		return `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}],"parameters":{"priority":` + strconv.Itoa(p) + `}}`
	}
	for _, c := range []struct {
		name   string
		body   string
		header []string
		want   int
	}{
		{"no key", goodBody, nil, 401},
		{"unknown key", goodBody, []string{"Authorization", "Bearer nope"}, 401},
		{"a key in another scheme", goodBody, []string{"Authorization", "Basic free-key"}, 401},
		{"bearer in lower case", goodBody, []string{"Authorization", "bearer free-key"}, 200},
		{"X-API-Key", goodBody, []string{"X-API-Key", "free-key"}, 200},
		{"free asks for high", withPriority(1), []string{"X-API-Key", "free-key"}, 200},
		{"single asks for high", withPriority(1), []string{"X-API-Key", "single-key"}, 403},
		{"single asks for low", withPriority(3), []string{"X-API-Key", "single-key"}, 200},
		{"slowpoke's one request", goodBody, []string{"X-API-Key", "slow-key"}, 200},
		{"slowpoke's second", goodBody, []string{"X-API-Key", "slow-key"}, 429},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := postKey(t, infer, c.body, c.header...)
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.want)
			}
			switch c.want {
			case 401:
				if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer realm="piccolo"` {
					t.Errorf("WWW-Authenticate %q", got)
				}
			case 429:
				// one request per 1,000 s: the bucket refills in about 1,000 s
				if s, _ := strconv.Atoi(resp.Header.Get("Retry-After")); s < 900 || s > 1000 {
					t.Errorf("Retry-After %q, want about 1000 s", resp.Header.Get("Retry-After"))
				}
			}
		})
	}
	t.Run("model routes need a key, health does not", func(t *testing.T) {
		for _, p := range []string{"/v2/models/echo", "/v2/models/echo/ready", "/v2/models/stats", "/v2/models/nope"} {
			resp, err := http.Get(ts.url + p)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 401 {
				t.Errorf("GET %s without a key: %d, want 401 (an unknown session too: no probing)", p, resp.StatusCode)
			}
		}
		if resp := postKey(t, ts.url+"/v2/repository/index", ""); resp.StatusCode != 401 {
			t.Errorf("repository index without a key: %d", resp.StatusCode)
		}
		for _, p := range []string{"/v2/health/ready", "/v2/health/live", "/v2"} {
			resp, err := http.Get(ts.url + p)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("GET %s without a key: %d, want 200", p, resp.StatusCode)
			}
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		ts.runner.Mu.Lock()
		ts.runner.Fn["e"] = func(in []api.Tensor) ([]api.Tensor, error) {
			entered <- struct{}{}
			<-release
			return in, nil
		}
		ts.runner.Mu.Unlock()
		first := make(chan int)
		go func() {
			req, _ := http.NewRequest("POST", infer, strings.NewReader(goodBody))
			req.Header.Set("X-API-Key", "single-key")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				first <- 0
				return
			}
			resp.Body.Close()
			first <- resp.StatusCode
		}()
		<-entered // the first request is in flight
		resp := postKey(t, infer, goodBody, "X-API-Key", "single-key")
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("second request of a tenant of concurrency 1: %d, Retry-After %q; want 429, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		close(release)
		if got := <-first; got != 200 {
			t.Errorf("first request: %d", got)
		}
		ts.runner.Mu.Lock()
		delete(ts.runner.Fn, "e")
		ts.runner.Mu.Unlock()
		if resp := postKey(t, infer, goodBody, "X-API-Key", "single-key"); resp.StatusCode != 200 {
			t.Errorf("after the first answered: %d, want 200 (its concurrency given back)", resp.StatusCode)
		}
	})
	for _, c := range []struct {
		tenant, reason string
		want           float64
	}{{"", "missing_key", 2 + 5}, {"", "unknown_key", 1}, {"single", "priority", 1}, {"slowpoke", "rate", 1}, {"single", "concurrency", 1}} {
		if got := refused(t, reg, c.tenant, c.reason); got != c.want {
			t.Errorf("%s{tenant=%q,reason=%q} = %v, want %v", metrics.GatewayTenantRefusedTotal, c.tenant, c.reason, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(reg, metrics.GatewayTenantRequestsTotal); n != 3 {
		t.Errorf("%s has %d series, want one per tenant that sent a request", metrics.GatewayTenantRequestsTotal, n)
	}
}

// TestTenantsGRPC: the same over gRPC, the key in metadata authorization or
// x-api-key: UNAUTHENTICATED, RESOURCE_EXHAUSTED with a retry-after header,
// PERMISSION_DENIED.
func TestTenantsGRPC(t *testing.T) {
	ts, _ := startTenantServers(t)
	req := func(priority int64) *inference.ModelInferRequest {
		r := &inference.ModelInferRequest{
			ModelName:        "echo",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1}}},
			RawInputContents: [][]byte{gatewaytest.FP32(1)},
		}
		if priority != 0 {
			r.Parameters = map[string]*inference.InferParameter{"priority": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: priority}}}
		}
		return r
	}
	md := func(kv ...string) context.Context {
		return metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...))
	}
	for _, c := range []struct {
		name     string
		ctx      context.Context
		priority int64
		want     codes.Code
	}{
		{"no key", context.Background(), 0, codes.Unauthenticated},
		{"unknown key", md("authorization", "Bearer nope"), 0, codes.Unauthenticated},
		{"authorization", md("authorization", "Bearer free-key"), 1, codes.OK},
		{"x-api-key", md("x-api-key", "free-key"), 0, codes.OK},
		{"single asks for high", md("x-api-key", "single-key"), 1, codes.PermissionDenied},
		{"slowpoke's one request", md("x-api-key", "slow-key"), 0, codes.OK},
		{"slowpoke's second", md("x-api-key", "slow-key"), 0, codes.ResourceExhausted},
	} {
		t.Run(c.name, func(t *testing.T) {
			var header metadata.MD
			_, err := ts.grpc.ModelInfer(c.ctx, req(c.priority), grpc.Header(&header))
			if got := status.Code(err); got != c.want {
				t.Fatalf("code %v (%v), want %v", got, err, c.want)
			}
			if c.want == codes.ResourceExhausted {
				if s, _ := strconv.Atoi(strings.Join(header.Get("retry-after"), "")); s < 900 {
					t.Errorf("retry-after %q, want about 1000 s", header.Get("retry-after"))
				}
			}
		})
	}
	t.Run("metadata needs a key", func(t *testing.T) {
		if _, err := ts.grpc.ModelMetadata(context.Background(), &inference.ModelMetadataRequest{Name: "echo"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("ModelMetadata without a key: %v", err)
		}
		if _, err := ts.grpc.ModelMetadata(md("x-api-key", "free-key"), &inference.ModelMetadataRequest{Name: "echo"}); err != nil {
			t.Errorf("ModelMetadata with a key: %v", err)
		}
		if _, err := ts.grpc.ServerLive(context.Background(), &inference.ServerLiveRequest{}); err != nil {
			t.Errorf("ServerLive without a key: %v", err)
		}
	})
}

// The tenants package numbers classes as the gateway does.
func TestTenantClassesAreTheGateways(t *testing.T) {
	if tenants.ClassHigh != gateway.ClassHigh || tenants.ClassNormal != gateway.ClassNormal || tenants.ClassLow != gateway.ClassLow {
		t.Fatal("tenants' priority classes differ from gateway's")
	}
}
