package kserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"github.com/piccolo-serving/piccolo/internal/testharness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const serverSessions = `
sessions:
  - name: echo
    slo: 2s
    modules:
      - {name: e, model: m, rate: 10}
  - name: chain
    slo: 2s
    modules:
      - {name: a, model: m, rate: 10}
      - {name: b, model: m, rate: 10, after: [a]}
  - name: slow
    slo: 300ms
    modules:
      - {name: stuck, model: m, rate: 10}
  - name: down
    slo: 2s
    modules:
      - {name: gone, model: m, rate: 10}
  - name: garbage
    slo: 2s
    modules:
      - {name: liar, model: m, rate: 10}
`

type testServers struct {
	url    string
	grpc   inference.GRPCInferenceServiceClient
	runner *gatewaytest.FakeRunner
	server *Server
}

// startServers boots the HTTP and gRPC servers on free loopback ports over a fake
// runner; everything stops in t.Cleanup.
func startServers(t testing.TB, maxBody int) *testServers {
	t.Helper()
	return startServersWith(t, ServerOptions{MaxBodyBytes: maxBody, Version: "test"})
}

// startServersWith is startServers with the server's options given whole.
func startServersWith(t testing.TB, opts ServerOptions) *testServers {
	t.Helper()
	f := gatewaytest.NewFakeRunner()
	f.Hang["stuck"] = true
	f.Fn["gone"] = func([]api.Tensor) ([]api.Tensor, error) {
		return nil, fmt.Errorf("%w: backend 127.0.0.1:1: connection refused", gateway.ErrUnavailable)
	}
	f.Fn["liar"] = func([]api.Tensor) ([]api.Tensor, error) {
		return []api.Tensor{{Name: "y", Datatype: "INT32", Shape: []int64{4}, Data: []byte{1}}}, nil
	}
	exec, err := gateway.NewDAGRunner(f, gatewaytest.SessionsFromYAML(t, serverSessions))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(exec, opts)
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.NewHTTPServer()
	go hs.Serve(hl)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := srv.NewGRPCServer()
	go gs.Serve(gl)
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(256<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		hs.Shutdown()
	})
	return &testServers{url: "http://" + hl.Addr().String(), grpc: inference.NewGRPCInferenceServiceClient(conn), runner: f, server: srv}
}

const goodBody = `{"id":"q7","inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}`

func TestHTTPEndpoints(t *testing.T) {
	ts := startServers(t, 4096)
	tests := []struct {
		name, method, path, body string
		status                   int
		errHas                   string // substring of "error", when the status is an error
	}{
		{"live", "GET", "/v2/health/live", "", 200, ""},
		{"ready", "GET", "/v2/health/ready", "", 200, ""},
		{"server metadata", "GET", "/v2", "", 200, ""},
		{"model metadata", "GET", "/v2/models/chain", "", 200, ""},
		{"model ready", "GET", "/v2/models/chain/ready", "", 200, ""},
		{"infer", "POST", "/v2/models/chain/infer", goodBody, 200, ""},
		{"infer with version", "POST", "/v2/models/chain/versions/1/infer", goodBody, 200, ""},
		{"garbage JSON", "POST", "/v2/models/chain/infer", `{"inputs":[{`, 400, "malformed JSON at byte"},
		{"empty body", "POST", "/v2/models/chain/infer", ``, 400, "empty request body"},
		{"wrong datatype", "POST", "/v2/models/chain/infer", `{"inputs":[{"name":"x","shape":[1],"datatype":"FLOAT32","data":[1]}]}`, 400, `unknown datatype "FLOAT32"`},
		{"shape mismatch", "POST", "/v2/models/chain/infer", `{"inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[1]}]}`, 400, "needs 2 elements, data has 1"},
		{"missing inputs", "POST", "/v2/models/chain/infer", `{"id":"x"}`, 400, "missing inputs"},
		{"unknown session infer", "POST", "/v2/models/nope/infer", goodBody, 404, `unknown session "nope" (request id`}, // no other session named
		{"unknown session metadata", "GET", "/v2/models/nope", "", 404, `unknown session "nope" (request id`},
		{"unknown session ready", "GET", "/v2/models/nope/ready", "", 404, `unknown session "nope" (request id`},
		{"oversized", "POST", "/v2/models/chain/infer", `{"inputs":[{"name":"x","shape":[1],"datatype":"BYTES","data":["` + strings.Repeat("a", 5000) + `"]}]}`, 413, "over the limit of 4096 bytes"},
		{"deadline", "POST", "/v2/models/slow/infer", goodBody, 504, `deadline exceeded: session "slow" did not answer within the request's deadline (request id q7)`},
		{"backend down", "POST", "/v2/models/down/infer", goodBody, 503, `unavailable: session "down" cannot be served now; retry later (request id q7)`},
		{"backend garbage", "POST", "/v2/models/garbage/infer", goodBody, 502, `backend error: a backend of session "garbage" failed or answered something unusable (request id q7)`},
		{"wrong method", "GET", "/v2/models/chain/infer", "", 405, "use POST"},
		{"unknown path", "GET", "/v3", "", 404, "endpoints: /v2"},
		{"nested path", "POST", "/v2/models/chain/extra/infer", goodBody, 404, "no endpoint /v2/models/chain/extra"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, m := testharness.HTTPDo(t, tc.method, ts.url+tc.path, tc.body)
			if status != tc.status {
				t.Fatalf("status %d (%v), want %d", status, m, tc.status)
			}
			if tc.errHas != "" {
				msg, _ := m["error"].(string)
				if !strings.Contains(msg, tc.errHas) {
					t.Errorf("error %q does not contain %q", msg, tc.errHas)
				}
				checkNoLeak(t, msg)
			}
		})
	}

	t.Run("infer response", func(t *testing.T) {
		_, m := testharness.HTTPDo(t, "POST", ts.url+"/v2/models/chain/infer", goodBody)
		if m["model_name"] != "chain" || m["id"] != "q7" {
			t.Errorf("model_name %v id %v, want chain q7", m["model_name"], m["id"])
		}
		outs := m["outputs"].([]any)
		o := outs[0].(map[string]any)
		if fmt.Sprint(o["data"]) != "[1 2 3]" || fmt.Sprint(o["shape"]) != "[1 3]" || o["datatype"] != "FP32" {
			t.Errorf("output %v, want the echoed FP32 [1,3] data", o)
		}
		p := m["parameters"].(map[string]any)
		for _, k := range []string{"piccolo.a.queue_ms", "piccolo.b.compute_ms", "piccolo.b.total_ms", "piccolo.e2e_ms"} {
			if _, ok := p[k].(float64); !ok {
				t.Errorf("parameter %q missing or not a number in %v", k, p)
			}
		}
	})
	t.Run("metadata", func(t *testing.T) {
		_, m := testharness.HTTPDo(t, "GET", ts.url+"/v2/models/chain", "")
		p := m["parameters"].(map[string]any)
		if m["name"] != "chain" || p["slo_ms"] != 2000.0 || p["modules"] != "a,b" {
			t.Errorf("metadata %v, want name chain, slo_ms 2000, modules a,b", m)
		}
	})
	t.Run("not ready", func(t *testing.T) {
		ts.server.SetReady(false)
		defer ts.server.SetReady(true)
		if status, _ := testharness.HTTPDo(t, "GET", ts.url+"/v2/health/ready", ""); status != 503 {
			t.Errorf("ready while not ready: %d, want 503", status)
		}
	})
}

// checkNoLeak fails when msg, an error a client got, carries what is behind
// the gateway: an address, a dial or RPC error, a module's failure text.
func checkNoLeak(t *testing.T, msg string) {
	t.Helper()
	for _, leak := range []string{"127.0.0.1", "dial", "connection refused", "rpc error", "transport", "module \"", "still running", "backend 1"} {
		if strings.Contains(msg, leak) {
			t.Errorf("error %q carries %q from behind the gateway", msg, leak)
		}
	}
}

func TestHTTPAdmission(t *testing.T) {
	ts := startServers(t, 0)
	ts.runner.Estimated.Store(int64(5 * time.Second)) // more than every SLO
	status, m := testharness.HTTPDo(t, "POST", ts.url+"/v2/models/echo/infer", goodBody)
	if status != 429 || !strings.Contains(fmt.Sprint(m["error"]), `overloaded: session "echo" cannot answer within its deadline`) {
		t.Errorf("status %d %v, want 429 saying the session is overloaded", status, m)
	}
	if ts.runner.CallsOf("e") != 0 {
		t.Errorf("a rejected request reached the runner")
	}
}

// TestHangingModuleIsolated: while requests to a hanging session wait for their
// deadline, requests to another session are answered promptly.
func TestHangingModuleIsolated(t *testing.T) {
	ts := startServers(t, 0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if status, _ := testharness.HTTPDo(t, "POST", ts.url+"/v2/models/slow/infer", goodBody); status != 504 {
				t.Errorf("hanging session: status %d, want 504", status)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond) // the slow requests are in flight
	start := time.Now()
	for range 20 {
		if status, m := testharness.HTTPDo(t, "POST", ts.url+"/v2/models/echo/infer", goodBody); status != 200 {
			t.Fatalf("echo while another session hangs: %d %v", status, m)
		}
	}
	if el := time.Since(start); el > 250*time.Millisecond*4 {
		t.Errorf("20 echo requests took %v while another session hung", el)
	}
	wg.Wait()
}

func TestGRPC(t *testing.T) {
	ts := startServers(t, 4096)
	ctx := context.Background()
	raw := &inference.ModelInferRequest{
		ModelName:        "chain",
		Id:               "g1",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 2}}},
		RawInputContents: [][]byte{gatewaytest.FP32(1.5, 2.5)},
	}
	t.Run("raw contents", func(t *testing.T) {
		resp, err := ts.grpc.ModelInfer(ctx, raw)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ModelName != "chain" || resp.Id != "g1" || len(resp.Outputs) != 1 || string(resp.RawOutputContents[0]) != string(gatewaytest.FP32(1.5, 2.5)) {
			t.Errorf("response %v", resp)
		}
		for _, k := range []string{"piccolo.a.queue_ms", "piccolo.e2e_ms"} {
			if _, ok := resp.Parameters[k].GetParameterChoice().(*inference.InferParameter_DoubleParam); !ok {
				t.Errorf("parameter %q missing: %v", k, resp.Parameters)
			}
		}
	})
	t.Run("typed contents", func(t *testing.T) {
		resp, err := ts.grpc.ModelInfer(ctx, &inference.ModelInferRequest{
			ModelName: "echo",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{
				{Name: "x", Datatype: "INT16", Shape: []int64{2}, Contents: &inference.InferTensorContents{IntContents: []int32{-3, 4}}},
				{Name: "s", Datatype: "BYTES", Shape: []int64{1}, Contents: &inference.InferTensorContents{BytesContents: [][]byte{[]byte("hi")}}},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if string(resp.RawOutputContents[0]) != "\xfd\xff\x04\x00" || string(resp.RawOutputContents[1]) != string(gatewaytest.BytesElems("hi")) {
			t.Errorf("raw outputs %q, want the typed inputs as raw bytes", resp.RawOutputContents)
		}
	})
	t.Run("metadata and health", func(t *testing.T) {
		if r, err := ts.grpc.ServerLive(ctx, &inference.ServerLiveRequest{}); err != nil || !r.Live {
			t.Errorf("ServerLive: %v %v", r, err)
		}
		if r, err := ts.grpc.ModelReady(ctx, &inference.ModelReadyRequest{Name: "chain"}); err != nil || !r.Ready {
			t.Errorf("ModelReady: %v %v", r, err)
		}
		if r, err := ts.grpc.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "chain"}); err != nil || r.Name != "chain" {
			t.Errorf("ModelMetadata: %v %v", r, err)
		}
	})

	withModel := func(name string) *inference.ModelInferRequest {
		r := proto.Clone(raw).(*inference.ModelInferRequest)
		r.ModelName = name
		return r
	}
	tests := []struct {
		name string
		req  *inference.ModelInferRequest
		code codes.Code
		has  string
	}{
		{"unknown session", withModel("nope"), codes.NotFound, `unknown session "nope" (request id`},
		{"deadline", withModel("slow"), codes.DeadlineExceeded, `deadline exceeded: session "slow" did not answer within the request's deadline (request id `},
		{"unavailable", withModel("down"), codes.Unavailable, `unavailable: session "down" cannot be served now; retry later (request id `},
		{"garbage from backend", withModel("garbage"), codes.Unavailable, `backend error: a backend of session "garbage" failed`},
		{"no inputs", &inference.ModelInferRequest{ModelName: "chain"}, codes.InvalidArgument, "missing inputs"},
		{"raw count", &inference.ModelInferRequest{ModelName: "chain", Inputs: raw.Inputs, RawInputContents: [][]byte{{1}, {2}}}, codes.InvalidArgument, "raw_input_contents has 2 entries for 1 inputs"},
		{"raw size", &inference.ModelInferRequest{ModelName: "chain", Inputs: raw.Inputs, RawInputContents: [][]byte{{1, 2, 3}}}, codes.InvalidArgument, "needs 8 bytes, got 3"},
		{"bad datatype", &inference.ModelInferRequest{ModelName: "chain", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "F32", Shape: []int64{1}}}, RawInputContents: [][]byte{{1, 2, 3, 4}}}, codes.InvalidArgument, `unknown datatype "F32"`},
		{"no data", &inference.ModelInferRequest{ModelName: "chain", Inputs: raw.Inputs}, codes.InvalidArgument, "no data"},
		{"int8 out of range", &inference.ModelInferRequest{ModelName: "chain", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "INT8", Shape: []int64{1}, Contents: &inference.InferTensorContents{IntContents: []int32{300}}}}}, codes.InvalidArgument, "300 is out of range for INT8"},
		{"oversized", &inference.ModelInferRequest{ModelName: "chain", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "UINT8", Shape: []int64{5000}}}, RawInputContents: [][]byte{make([]byte, 5000)}}, codes.ResourceExhausted, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ts.grpc.ModelInfer(ctx, tc.req)
			st, _ := status.FromError(err)
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.has) {
				t.Errorf("got %v, want code %v with %q", err, tc.code, tc.has)
			}
			checkNoLeak(t, st.Message())
		})
	}
	t.Run("client deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := ts.grpc.ModelInfer(ctx, withModel("slow"))
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("got %v, want DEADLINE_EXCEEDED", err)
		}
	})
	t.Run("admission", func(t *testing.T) {
		ts.runner.Estimated.Store(int64(5 * time.Second))
		defer ts.runner.Estimated.Store(0)
		_, err := ts.grpc.ModelInfer(ctx, withModel("echo"))
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("got %v, want RESOURCE_EXHAUSTED", err)
		}
	})
}

func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		err  error
		http int
		code codes.Code
	}{
		{gateway.BadInput("x"), 400, codes.InvalidArgument},
		{fmt.Errorf("wrap: %w", gateway.ErrUnknownSession), 404, codes.NotFound},
		{gateway.ErrTooLarge, 413, codes.ResourceExhausted},
		{gateway.ErrOverloaded, 429, codes.ResourceExhausted},
		{gateway.ErrDeadline, 504, codes.DeadlineExceeded},
		{context.DeadlineExceeded, 504, codes.DeadlineExceeded},
		{gateway.ErrUnavailable, 503, codes.Unavailable},
		{gateway.ErrBackend, 502, codes.Unavailable},
		{errors.New("anything else"), 502, codes.Unavailable},
	} {
		if got := HTTPStatus(tc.err); got != tc.http {
			t.Errorf("HTTPStatus(%v) = %d, want %d", tc.err, got, tc.http)
		}
		if got := GRPCCode(tc.err); got != tc.code {
			t.Errorf("GRPCCode(%v) = %v, want %v", tc.err, got, tc.code)
		}
	}
}

func TestAdminAPIOffWithoutAdmin(t *testing.T) {
	ts := startServers(t, 0)
	status, m := testharness.HTTPDo(t, "GET", ts.url+"/admin/plan", "")
	if status != 404 || !strings.Contains(fmt.Sprint(m["error"]), "--admin-token") {
		t.Errorf("GET /admin/plan on a server without Admin: %d %v; want 404 saying how to turn it on", status, m)
	}
}
