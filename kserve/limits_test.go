package kserve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/gateway"
)

// manyInputs is a request body of n inputs named by name(i).
func manyInputs(n int, name func(int) string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"inputs":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":%q,"shape":[0],"datatype":"FP32","data":[]}`, name(i))
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// TestRequestLimits: the caps on inputs, outputs, parameters and names, and
// duplicate input and output names, are refused 400 naming the limit, over
// JSON and gRPC alike, in linear time: 100,000 inputs (17 s of CPU before
// the cap and the linear duplicate check) answer at once.
func TestRequestLimits(t *testing.T) {
	long := strings.Repeat("n", MaxNameBytes+1)
	params := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"k%d":1`, i)
		}
		return b.String()
	}
	outputs := func(names ...string) string {
		var b strings.Builder
		for i, n := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"name":%q}`, n)
		}
		return b.String()
	}
	in := `{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]}`
	manyOut := make([]string, MaxOutputs+1)
	for i := range manyOut {
		manyOut[i] = fmt.Sprint("o", i)
	}
	tests := []struct {
		name, body, want string
	}{
		{"100,000 empty inputs", string(manyInputs(100_000, func(i int) string { return fmt.Sprint("x", i) })), "more than 256 inputs"},
		{"100,000 inputs of one name", string(manyInputs(100_000, func(int) string { return "x" })), `input "x" appears twice`},
		{"a duplicate after many inputs", string(manyInputs(MaxInputs, func(i int) string { return fmt.Sprint("x", min(i, MaxInputs-2)) })), `inputs[255]: input "x254" appears twice`},
		{"output asked for twice", `{"inputs":[` + in + `],"outputs":[` + outputs("y", "z", "y") + `]}`, `outputs[2]: output "y" is asked for twice`},
		{"too many outputs", `{"inputs":[` + in + `],"outputs":[` + outputs(manyOut...) + `]}`, "more than 256 requested outputs"},
		{"a shape of 100,000 dimensions", `{"inputs":[{"name":"x","datatype":"FP32","data":[1],"shape":[` + strings.Repeat("1,", 99_999) + `1]}]}`, "shape has more than 64 dimensions"},
		{"long input name", `{"inputs":[{"name":"` + long + `","shape":[1],"datatype":"FP32","data":[1]}]}`, "inputs[0]: name of 257 bytes is over the limit of 256"},
		{"long output name", `{"inputs":[` + in + `],"outputs":[` + outputs(long) + `]}`, "outputs[0]: name of 257 bytes"},
		{"long id", `{"id":"` + long + `","inputs":[` + in + `]}`, `"id" of 257 bytes`},
		{"too many request parameters", `{"inputs":[` + in + `],"parameters":{` + params(MaxParameters+1) + `}}`, "parameters: more than 64 keys"},
		{"long request parameter key", `{"inputs":[` + in + `],"parameters":{"` + long + `":1}}`, "parameters: key of 257 bytes is over the limit of 256"},
		{"long input parameter key", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1],"parameters":{"` + long + `":1}}]}`, "inputs[0]: parameters: key of 257 bytes"},
		{"long output parameter key", `{"inputs":[` + in + `],"outputs":[{"name":"y","parameters":{"` + long + `":1}}]}`, "outputs[0]: parameters: key of 257 bytes"},
		{"too many input parameters", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1],"parameters":{` + params(MaxParameters+1) + `}}]}`, `inputs[0]: "parameters" has more than 64 keys`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req gateway.InferRequest
			start := time.Now()
			err := DecodeInferRequest([]byte(tc.body), &req)
			took := time.Since(start)
			if !errors.Is(err, gateway.ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want bad input with %q", err, tc.want)
			}
			if took > 2*time.Second { // a loaded 2-core machine; the quadratic check took 17 s
				t.Errorf("refused after %v", took)
			}
		})
	}

	ts := startServers(t, 64<<20)
	code, _, body := post(t, ts.url+"/v2/models/echo/infer", []byte(`{"inputs":[`+in+`],"outputs":[`+outputs("x", "x")+`]}`))
	if code != 400 || !strings.Contains(string(body), "asked for twice") {
		t.Errorf("HTTP duplicate outputs: %d %s; want 400", code, body)
	}
	x := &inference.ModelInferRequest_InferInputTensor{Name: "x", Datatype: "FP32", Shape: []int64{1}, Contents: &inference.InferTensorContents{Fp32Contents: []float32{1}}}
	gin := make([]*inference.ModelInferRequest_InferInputTensor, 100_000)
	for i := range gin {
		gin[i] = &inference.ModelInferRequest_InferInputTensor{Name: "x", Datatype: "FP32", Shape: []int64{0}, Contents: &inference.InferTensorContents{}}
	}
	grpcTests := []struct {
		name string
		req  *inference.ModelInferRequest
		want string
	}{
		{"100,000 inputs", &inference.ModelInferRequest{ModelName: "echo", Inputs: gin}, "more than 256"},
		{"duplicate outputs", &inference.ModelInferRequest{ModelName: "echo", Inputs: gin[:0:0], Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "y"}, {Name: "y"}}}, "asked for twice"},
		{"long input name", &inference.ModelInferRequest{ModelName: "echo", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: long, Datatype: "FP32", Shape: []int64{1}, Contents: x.Contents}}}, "over the limit of 256"},
		{"long parameter key", &inference.ModelInferRequest{ModelName: "echo", Inputs: []*inference.ModelInferRequest_InferInputTensor{x}, Parameters: map[string]*inference.InferParameter{long: {}}}, "parameters: key of 257 bytes"},
		{"a shape of 100,000 dimensions", &inference.ModelInferRequest{ModelName: "echo", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: ones(100_000), Contents: x.Contents}}}, "more than 64 dimensions"},
	}
	grpcTests[1].req.Inputs = []*inference.ModelInferRequest_InferInputTensor{x}
	for _, tc := range grpcTests {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := ts.grpc.ModelInfer(ctx, tc.req)
		cancel()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gRPC %s: %v; want INVALID_ARGUMENT with %q", tc.name, err, tc.want)
		}
	}
}

// TestDeclaredShapeIsNotPreallocated: a body declaring an FP64 [4,000,000]
// tensor (32 MB) that holds three elements costs about its own size, not
// the declared tensor's: the data grow as elements arrive.
func TestDeclaredShapeIsNotPreallocated(t *testing.T) {
	body := []byte(`{"inputs":[{"name":"x","datatype":"FP64","shape":[4000000],"data":[1,2,3` +
		strings.Repeat(" ", 8<<20) + `]}]}`)
	var req gateway.InferRequest
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := DecodeInferRequest(body, &req)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, gateway.ErrBadInput) || !strings.Contains(err.Error(), "needs 4000000 elements, data has 3") {
		t.Fatalf("got %v; want the shape's count refused", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("decoding allocated %d bytes; want < 1 MiB (the declared tensor is 32 MB)", got)
	}
}

// TestInflightBudget: with the in-flight budget smaller than a request's
// bytes, the request is refused 503 with Retry-After (gRPC
// RESOURCE_EXHAUSTED) whether its bytes came as sent, decompressed or
// decoded; a request that fits is served; every request gives its share
// back when answered.
func TestInflightBudget(t *testing.T) {
	const budget = 64 << 10
	ts := startServersWith(t, ServerOptions{MaxBodyBytes: 8 << 20, MaxInflightBytes: budget, Version: "test"})
	url := ts.url + "/v2/models/echo/infer"
	big := []byte(`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]` + strings.Repeat(" ", 2*budget) + `}`)
	// 40,000 zeros: 80 kB of JSON, compressed to about 100 bytes; 160 kB as FP32.
	zeros := []byte(`{"inputs":[{"name":"x","shape":[40000],"datatype":"FP32","data":[0` + strings.Repeat(",0", 39999) + `]}]}`)
	for _, tc := range []struct {
		name    string
		body    []byte
		headers []string
	}{
		{"body over the budget", big, nil},
		{"gzip body inflating over the budget", gzipped(t, big), []string{"Content-Encoding", "gzip"}},
		{"decoded tensor over the budget", gzipped(t, zeros), []string{"Content-Encoding", "gzip"}},
	} {
		req, _ := http.NewRequest("POST", url, bytes.NewReader(tc.body))
		for i := 0; i+1 < len(tc.headers); i += 2 {
			req.Header.Set(tc.headers[i], tc.headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: %d, Retry-After %q; want 503 with Retry-After", tc.name, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if code, _, body := post(t, url, []byte(goodBody)); code != 200 {
		t.Errorf("a request within the budget: %d %s", code, body)
	}
	raw := make([]byte, 2*budget)
	_, err := ts.grpc.ModelInfer(context.Background(), &inference.ModelInferRequest{ModelName: "echo",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "UINT8", Shape: []int64{int64(len(raw))}}},
		RawInputContents: [][]byte{raw}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("gRPC over the budget: %v; want RESOURCE_EXHAUSTED", err)
	}
	if n := ts.server.budget.used.Load(); n != 0 {
		t.Errorf("%d bytes still held after every request was answered; want 0", n)
	}
}

// ones returns a shape of n dimensions of 1 (one element whatever n).
func ones(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = 1
	}
	return s
}
