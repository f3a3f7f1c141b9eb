package kserve

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/internal/testharness"
)

// triStats is the statistics extension's HTTP answer, as a Triton client reads it.
type triStats struct {
	ModelStats []struct {
		Name           string `json:"name"`
		Version        string `json:"version"`
		LastInference  uint64 `json:"last_inference"`
		InferenceCount uint64 `json:"inference_count"`
		ExecutionCount uint64 `json:"execution_count"`
		InferenceStats map[string]struct {
			Count uint64 `json:"count"`
			Ns    uint64 `json:"ns"`
		} `json:"inference_stats"`
		BatchStats []any `json:"batch_stats"`
	} `json:"model_stats"`
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %s: %v", url, b, err)
		}
	}
	return resp.StatusCode
}

// TestStatistics: requests over HTTP and gRPC are counted per session, in
// Triton's JSON shape and in the ModelStatistics RPC, with the modules' queue
// and compute times summed (the fake runner queues each module 1 ms and
// computes 2 ms: the chain's two modules make 2 and 4 ms a request).
func TestStatistics(t *testing.T) {
	ts := startServers(t, 0)
	ctx := context.Background()
	for range 2 {
		if st, m := testharness.HTTPDo(t, "POST", ts.url+"/v2/models/chain/infer", goodBody); st != 200 {
			t.Fatalf("infer: %d %v", st, m)
		}
	}
	var grpcReq inference.ModelInferRequest
	grpcReq.ModelName = "chain"
	grpcReq.Inputs = []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 1},
		Contents: &inference.InferTensorContents{Fp32Contents: []float32{1}}}}
	if _, err := ts.grpc.ModelInfer(ctx, &grpcReq); err != nil {
		t.Fatal(err)
	}
	testharness.HTTPDo(t, "POST", ts.url+"/v2/models/down/infer", goodBody)          // 503
	testharness.HTTPDo(t, "POST", ts.url+"/v2/models/chain/infer", `{"inputs":[}`)   // 400
	testharness.HTTPDo(t, "POST", ts.url+"/v2/models/nosuchsession/infer", goodBody) // 404: no session to count

	var one triStats
	if st := getJSON(t, ts.url+"/v2/models/chain/stats", &one); st != 200 || len(one.ModelStats) != 1 {
		t.Fatalf("GET chain/stats: %d %+v", st, one)
	}
	c := one.ModelStats[0]
	is := c.InferenceStats
	if c.Name != "chain" || c.Version != "1" || c.InferenceCount != 3 || c.ExecutionCount != 3 || c.LastInference == 0 || c.BatchStats == nil {
		t.Errorf("chain stats %+v; want name chain, version 1, 3 inferences, a last inference, batch_stats []", c)
	}
	if is["success"].Count != 3 || is["success"].Ns == 0 || is["fail"].Count != 1 || is["fail"].Ns == 0 {
		t.Errorf("success %+v fail %+v; want 3 successes, 1 failure, with their time", is["success"], is["fail"])
	}
	if is["queue"] != (struct {
		Count uint64 `json:"count"`
		Ns    uint64 `json:"ns"`
	}{3, 6e6}) || is["compute_infer"].Count != 3 || is["compute_infer"].Ns != 12e6 {
		t.Errorf("queue %+v compute_infer %+v; want 3 × 2 ms and 3 × 4 ms", is["queue"], is["compute_infer"])
	}
	for _, k := range []string{"compute_input", "compute_output"} {
		if _, ok := is[k]; !ok {
			t.Errorf("inference_stats lacks %q", k)
		}
	}

	var all triStats
	if st := getJSON(t, ts.url+"/v2/models/stats", &all); st != 200 {
		t.Fatalf("GET /v2/models/stats: %d", st)
	}
	var names []string
	for _, m := range all.ModelStats {
		names = append(names, m.Name)
		if m.Name == "down" && (m.InferenceStats["fail"].Count != 1 || m.InferenceCount != 0) {
			t.Errorf("down: %+v, want one failure", m)
		}
	}
	if diff := cmp.Diff([]string{"chain", "down", "echo", "garbage", "slow"}, names); diff != "" {
		t.Errorf("sessions listed (-want +got):\n%s", diff)
	}

	r, err := ts.grpc.ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: "chain"})
	if err != nil {
		t.Fatal(err)
	}
	g := r.GetModelStats()[0].GetInferenceStats()
	if g.GetSuccess().GetCount() != 3 || g.GetQueue().GetNs() != 6e6 || g.GetComputeInfer().GetNs() != 12e6 || g.GetFail().GetCount() != 1 {
		t.Errorf("ModelStatistics chain = %v; want what HTTP says", r)
	}
	if _, err := ts.grpc.ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("ModelStatistics nope: %v, want NotFound", err)
	}
	if st := getJSON(t, ts.url+"/v2/models/nope/stats", &one); st != 404 {
		t.Errorf("GET nope/stats: %d, want 404", st)
	}
	if st := getJSON(t, ts.url+"/v2/models/chain/versions/2/stats", &one); st != 404 {
		t.Errorf("GET chain/versions/2/stats: %d, want 404", st)
	}
	if st := getJSON(t, ts.url+"/v2/models/chain/versions/1/stats", &one); st != 200 {
		t.Errorf("GET chain/versions/1/stats: %d, want 200", st)
	}
}

// TestRepositoryIndex: POST /v2/repository/index and RepositoryIndex list
// the sessions with version 1, READY while the gateway is ready; with
// "ready": true, only those that are.
func TestRepositoryIndex(t *testing.T) {
	ts := startServers(t, 0)
	post := func(body string) (int, []map[string]string) {
		resp, err := http.Post(ts.url+"/v2/repository/index", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var idx []map[string]string
		if resp.StatusCode == 200 {
			if err := json.Unmarshal(b, &idx); err != nil {
				t.Fatalf("%s: %v", b, err)
			}
		}
		return resp.StatusCode, idx
	}
	st, idx := post("")
	if st != 200 || len(idx) != 5 || idx[0]["name"] != "chain" || idx[0]["version"] != "1" || idx[0]["state"] != "READY" {
		t.Errorf("index: %d %v; want the 5 sessions READY", st, idx)
	}
	ts.server.SetReady(false)
	if st, idx = post(`{"ready":false}`); st != 200 || len(idx) != 5 || idx[0]["state"] != "UNAVAILABLE" || idx[0]["reason"] == "" {
		t.Errorf("index while not ready: %d %v; want UNAVAILABLE with a reason", st, idx)
	}
	if st, idx = post(`{"ready":true,"repository_name":""}`); st != 200 || len(idx) != 0 {
		t.Errorf("ready-only index while not ready: %d %v; want none", st, idx)
	}
	ts.server.SetReady(true)
	if st, _ = post(`{"ready":1}`); st != 400 {
		t.Errorf("ready: 1 answered %d, want 400", st)
	}
	r, err := ts.grpc.RepositoryIndex(context.Background(), &inference.RepositoryIndexRequest{Ready: true})
	if err != nil || len(r.GetModels()) != 5 {
		t.Errorf("RepositoryIndex: %v %v; want 5 sessions", r, err)
	}
}

// TestStatisticsConcurrent: requests counted from many goroutines at once add
// up (run with -race: the counters take no lock).
func TestStatisticsConcurrent(t *testing.T) {
	ts := startServers(t, 0)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				var ctx fasthttp.RequestCtx
				ctx.Request.SetRequestURI("/v2/models/echo/infer")
				ctx.Request.Header.SetMethod("POST")
				ctx.Request.SetBodyString(goodBody)
				ts.server.HandleHTTP(&ctx)
			}
		}()
	}
	wg.Wait()
	r, err := ts.server.modelStatistics("echo", "")
	if err != nil {
		t.Fatal(err)
	}
	is := r.ModelStats[0].InferenceStats
	if is.Success.Count != workers*each || is.Queue.Count != workers*each || is.Queue.Ns != workers*each*1e6 {
		t.Errorf("success %v queue %v; want %d requests of 1 ms queueing", is.Success, is.Queue, workers*each)
	}
}
