package backends_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/sim"
)

// checkItems asserts that out has one output0 per item, with the item's rows,
// and that row r of item i holds the checksum of row r of item i's inputs.
func checkItems(t *testing.T, items, out [][]api.Tensor) {
	t.Helper()
	if len(out) != len(items) {
		t.Fatalf("got outputs for %d items, want %d", len(out), len(items))
	}
	for i, it := range items {
		if len(out[i]) != 1 || out[i][0].Name != sim.OutputName || out[i][0].Datatype != "FP32" {
			t.Fatalf("item %d: outputs %+v, want one FP32 %s", i, out[i], sim.OutputName)
		}
		rows := it[0].Shape[0]
		if got := out[i][0].Shape; len(got) != 2 || got[0] != rows || got[1] != 1 {
			t.Fatalf("item %d: output shape %v, want [%d 1]", i, got, rows)
		}
		vals := decodeFP32(out[i][0].Data)
		for r := int64(0); r < rows; r++ {
			var rowBytes [][]byte
			for _, in := range it {
				n := int64(len(in.Data)) / rows
				rowBytes = append(rowBytes, in.Data[r*n:(r+1)*n])
			}
			if want := sim.Checksum(rowBytes...); vals[r] != want {
				t.Errorf("item %d row %d: output %v, want checksum %v of its own input", i, r, vals[r], want)
			}
		}
	}
}

func TestInferKeepsEveryItemsOutput(t *testing.T) {
	b := startSim(t, sim.Options{})
	load(t, b, "m", 8, 1)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		rows []int // rows of each item
	}{
		{"one item", []int{1}},
		{"three items", []int{1, 1, 1}},
		{"eight items", []int{1, 1, 1, 1, 1, 1, 1, 1}},
		{"items of several rows", []int{2, 1, 3, 2}},
		{"one item of 8 rows", []int{8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var items [][]api.Tensor
			for i, k := range tc.rows {
				items = append(items, item(len(tc.rows)*10+i, k))
			}
			out, err := b.client.Infer(ctx, "m", items)
			if err != nil {
				t.Fatal(err)
			}
			checkItems(t, items, out)
		})
	}
}

func TestInferSeveralInputsIncludingBytes(t *testing.T) {
	b := startSim(t, sim.Options{})
	load(t, b, "m", 8, 1)
	str := func(ss ...string) []byte {
		var out []byte
		for _, s := range ss {
			out = binary.LittleEndian.AppendUint32(out, uint32(len(s)))
			out = append(out, s...)
		}
		return out
	}
	items := [][]api.Tensor{
		{item(1, 1)[0], {Name: "text", Datatype: "BYTES", Shape: []int64{1, 2}, Data: str("a", "bcd")}},
		{item(2, 2)[0], {Name: "text", Datatype: "BYTES", Shape: []int64{2, 2}, Data: str("", "x", "yy", "zzz")}},
	}
	out, err := b.client.Infer(context.Background(), "m", items)
	if err != nil {
		t.Fatal(err)
	}
	// Expected checksums per row: the row bytes of input0 then of text.
	want := [][]float32{
		{sim.Checksum(items[0][0].Data, str("a", "bcd"))},
		{sim.Checksum(items[1][0].Data[:16], str("", "x")), sim.Checksum(items[1][0].Data[16:], str("yy", "zzz"))},
	}
	for i := range want {
		got := decodeFP32(out[i][0].Data)
		if len(got) != len(want[i]) {
			t.Fatalf("item %d: %d rows out, want %d", i, len(got), len(want[i]))
		}
		for r := range got {
			if got[r] != want[i][r] {
				t.Errorf("item %d row %d: %v, want %v", i, r, got[r], want[i][r])
			}
		}
	}
}

func TestLanesRunConcurrencyBatchesAtOnce(t *testing.T) {
	b := startSim(t, sim.Options{})
	load(t, b, "lanes", 8, 2) // every batch takes 300ms, 2 at a time
	const batches, d = 4, 300 * time.Millisecond
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, batches)
	for i := 0; i < batches; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			items := [][]api.Tensor{item(i, 1), item(i+100, 1)}
			out, err := b.client.Infer(context.Background(), "lanes", items)
			if err == nil && len(out) != 2 {
				err = errors.New("wrong item count")
			}
			errs <- err
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// 2 lanes: 4 batches take 2 rounds. 1 lane would take 4 rounds, 4 lanes 1.
	if elapsed < 2*d-10*time.Millisecond || elapsed > 2*d+d*5/6 {
		t.Errorf("%d batches of %v on 2 lanes took %v; want about %v (not %v, not %v)", batches, d, elapsed, 2*d, d, 4*d)
	}
}

func TestDurationFollowsProfile(t *testing.T) {
	b := startSim(t, sim.Options{})
	load(t, b, "steps", 8, 1) // profiled: 1→20ms, 4→250ms, 8→500ms
	for _, tc := range []struct {
		n        int
		min, max time.Duration // min is the profiled duration; max leaves room for a loaded machine
	}{
		{1, 20 * time.Millisecond, 200 * time.Millisecond},
		{3, 173333333, 450 * time.Millisecond},                 // linear between 1 (20 ms) and 4 (250 ms)
		{5, 312500 * time.Microsecond, 700 * time.Millisecond}, // between 4 (250 ms) and 8 (500 ms)
	} {
		var items [][]api.Tensor
		for i := 0; i < tc.n; i++ {
			items = append(items, item(i, 1))
		}
		start := time.Now()
		if _, err := b.client.Infer(context.Background(), "steps", items); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el < tc.min || el > tc.max {
			t.Errorf("batch of %d took %v; want %v to %v", tc.n, el, tc.min, tc.max)
		}
	}
}

func TestModelLifecycle(t *testing.T) {
	b := startSim(t, sim.Options{})
	ctx := context.Background()
	ready := func() bool {
		t.Helper()
		r, err := b.client.Ready(ctx, "m")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if ready() {
		t.Fatal("model m ready before load")
	}
	if _, err := b.client.Infer(ctx, "m", [][]api.Tensor{item(1, 1)}); !errors.Is(err, backends.ErrModelNotLoaded) {
		t.Fatalf("infer before load: %v, want ErrModelNotLoaded", err)
	}
	if _, err := b.client.Metadata(ctx, "m"); !errors.Is(err, backends.ErrModelNotLoaded) {
		t.Fatalf("metadata before load: %v, want ErrModelNotLoaded", err)
	}
	load(t, b, "m", 4, 2)
	if !ready() {
		t.Fatal("model m not ready after load")
	}
	md, err := b.client.Metadata(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if md.Name != "m" || md.Platform != sim.Platform || len(md.Inputs) != 1 || md.Inputs[0].Name != sim.InputName ||
		len(md.Outputs) != 1 || md.Outputs[0].Name != sim.OutputName || md.Outputs[0].Datatype != "FP32" {
		t.Errorf("metadata %+v", md)
	}
	info := b.server.Loaded()
	if len(info) != 1 || info[0].MaxBatch != 4 || info[0].Concurrency != 2 {
		t.Errorf("loaded %+v, want m with batch 4, concurrency 2", info)
	}
	idx, err := b.raw.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, m := range idx.GetModels() {
		states[m.GetName()] = m.GetState()
	}
	if len(states) != 3 || states["m"] != "READY" || states["steps"] != "UNAVAILABLE" || states["lanes"] != "UNAVAILABLE" {
		t.Errorf("repository index %v; want m READY, steps and lanes UNAVAILABLE, nothing of t4", states)
	}
	if live, err := b.client.Live(ctx); err != nil || !live {
		t.Errorf("live %v, %v", live, err)
	}
	if err := b.client.Unload(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if ready() {
		t.Fatal("model m ready after unload")
	}
	if err := b.client.Unload(ctx, "nope"); !errors.Is(err, backends.ErrUnknownModel) {
		t.Errorf("unload unknown: %v, want ErrUnknownModel", err)
	}
	b.server.Drain()
	if live, err := b.client.Live(ctx); err != nil || live {
		t.Errorf("after Drain: live %v, %v; want false", live, err)
	}
}

func TestLoadParameters(t *testing.T) {
	b := startSim(t, sim.Options{})
	ctx := context.Background()
	i64 := func(v int64) *inference.ModelRepositoryParameter {
		return &inference.ModelRepositoryParameter{ParameterChoice: &inference.ModelRepositoryParameter_Int64Param{Int64Param: v}}
	}
	str := func(v string) *inference.ModelRepositoryParameter {
		return &inference.ModelRepositoryParameter{ParameterChoice: &inference.ModelRepositoryParameter_StringParam{StringParam: v}}
	}
	boolp := &inference.ModelRepositoryParameter{ParameterChoice: &inference.ModelRepositoryParameter_BoolParam{BoolParam: true}}
	for _, tc := range []struct {
		name      string
		model     string
		params    map[string]*inference.ModelRepositoryParameter
		code      codes.Code
		batch, cc int // loaded, when code is OK
	}{
		{"int64 params", "m", map[string]*inference.ModelRepositoryParameter{"batch": i64(4), "concurrency": i64(1)}, codes.OK, 4, 1},
		{"string params", "m", map[string]*inference.ModelRepositoryParameter{"batch": str("8"), "concurrency": str("2")}, codes.OK, 8, 2},
		{"defaults: largest entry", "m", nil, codes.OK, 8, 2},
		{"only concurrency", "m", map[string]*inference.ModelRepositoryParameter{"concurrency": i64(1)}, codes.OK, 8, 1},
		{"unknown model", "nope", nil, codes.NotFound, 0, 0},
		{"model of another hardware", "other-hw", nil, codes.NotFound, 0, 0},
		{"unprofiled concurrency", "m", map[string]*inference.ModelRepositoryParameter{"concurrency": i64(3)}, codes.InvalidArgument, 0, 0},
		{"batch above profile", "m", map[string]*inference.ModelRepositoryParameter{"batch": i64(9), "concurrency": i64(1)}, codes.InvalidArgument, 0, 0},
		{"unknown parameter", "m", map[string]*inference.ModelRepositoryParameter{"config": str("{}")}, codes.InvalidArgument, 0, 0},
		{"bool param", "m", map[string]*inference.ModelRepositoryParameter{"batch": boolp}, codes.InvalidArgument, 0, 0},
		{"non-number", "m", map[string]*inference.ModelRepositoryParameter{"batch": str("eight")}, codes.InvalidArgument, 0, 0},
		{"zero", "m", map[string]*inference.ModelRepositoryParameter{"batch": i64(0)}, codes.InvalidArgument, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.raw.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: tc.model, Parameters: tc.params})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code %v (%v), want %v", got, err, tc.code)
			}
			if err != nil {
				if msg := status.Convert(err).Message(); len(msg) < 20 {
					t.Errorf("message %q does not say what was wrong", msg)
				}
				return
			}
			for _, info := range b.server.Loaded() {
				if info.Name == tc.model && (info.MaxBatch != tc.batch || info.Concurrency != tc.cc) {
					t.Errorf("loaded batch %d concurrency %d, want %d %d", info.MaxBatch, info.Concurrency, tc.batch, tc.cc)
				}
			}
		})
	}
}

func TestModelInferRejectsBadRequests(t *testing.T) {
	b := startSim(t, sim.Options{})
	load(t, b, "m", 8, 1)
	in := func(name, dt string, shape ...int64) *inference.ModelInferRequest_InferInputTensor {
		return &inference.ModelInferRequest_InferInputTensor{Name: name, Datatype: dt, Shape: shape}
	}
	good := fp32(1, 2, 3, 4)
	for _, tc := range []struct {
		name string
		req  *inference.ModelInferRequest
		code codes.Code
	}{
		{"unknown model", &inference.ModelInferRequest{ModelName: "nope", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("input0", "FP32", 1, 4)}, RawInputContents: [][]byte{good}}, codes.NotFound},
		{"not loaded", &inference.ModelInferRequest{ModelName: "steps", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("input0", "FP32", 1, 4)}, RawInputContents: [][]byte{good}}, codes.FailedPrecondition},
		{"wrong datatype", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("input0", "INT32", 1, 4)}, RawInputContents: [][]byte{good}}, codes.InvalidArgument},
		{"unknown datatype", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("x", "FP33", 1, 4)}, RawInputContents: [][]byte{good}}, codes.InvalidArgument},
		{"short raw data", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("input0", "FP32", 1, 4)}, RawInputContents: [][]byte{good[:15]}}, codes.InvalidArgument},
		{"wrong rank", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("input0", "FP32", 1, 2, 2)}, RawInputContents: [][]byte{good}}, codes.InvalidArgument},
		{"batch too large", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("input0", "FP32", 9, 1)}, RawInputContents: [][]byte{make([]byte, 36)}}, codes.InvalidArgument},
		{"empty batch", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("input0", "FP32", 0, 4)}, RawInputContents: [][]byte{{}}}, codes.InvalidArgument},
		{"scalar", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("x", "FP32")}, RawInputContents: [][]byte{good[:4]}}, codes.InvalidArgument},
		{"negative dim", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("x", "FP32", -1, 4)}, RawInputContents: [][]byte{good}}, codes.InvalidArgument},
		{"no inputs", &inference.ModelInferRequest{ModelName: "m"}, codes.InvalidArgument},
		{"raw count", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("input0", "FP32", 1, 4), in("x", "FP32", 1, 4)}, RawInputContents: [][]byte{good}}, codes.InvalidArgument},
		{"dim 0 disagrees", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("input0", "FP32", 1, 4), in("x", "FP32", 2, 2)}, RawInputContents: [][]byte{good, good}}, codes.InvalidArgument},
		{"duplicate input", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("input0", "FP32", 1, 4), in("input0", "FP32", 1, 4)}, RawInputContents: [][]byte{good, good}}, codes.InvalidArgument},
		{"unknown output", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("input0", "FP32", 1, 4)}, RawInputContents: [][]byte{good},
			Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "nope"}}}, codes.InvalidArgument},
		{"bad BYTES", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("s", "BYTES", 1, 1)}, RawInputContents: [][]byte{{9, 0, 0, 0, 'a'}}}, codes.InvalidArgument},
		{"no data", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{in("input0", "FP32", 1, 4)}}, codes.InvalidArgument},
		{"FP16 typed", &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "h", Datatype: "FP16", Shape: []int64{1, 1}, Contents: &inference.InferTensorContents{}}}}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.raw.ModelInfer(context.Background(), tc.req)
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code %v (%v), want %v", got, err, tc.code)
			}
			if len(tc.req.GetInputs()) > 0 && tc.code == codes.InvalidArgument && tc.name != "unknown output" {
				msg := status.Convert(err).Message()
				if !containsAny(msg, tc.req.Inputs) && tc.name != "batch too large" && tc.name != "empty batch" && tc.name != "raw count" {
					t.Errorf("message %q does not name the tensor", msg)
				}
			}
		})
	}
}

func containsAny(msg string, ins []*inference.ModelInferRequest_InferInputTensor) bool {
	for _, in := range ins {
		if in.GetName() != "" && contains(msg, `"`+in.GetName()+`"`) {
			return true
		}
	}
	return false
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestModelInferTypedContentsAndRequestedOutputs(t *testing.T) {
	b := startSim(t, sim.Options{})
	load(t, b, "m", 8, 1)
	resp, err := b.raw.ModelInfer(context.Background(), &inference.ModelInferRequest{
		ModelName: "m", Id: "req-7",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input0", Datatype: "FP32", Shape: []int64{2, 2},
			Contents: &inference.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}}},
		Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: sim.OutputName}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetId() != "req-7" || resp.GetModelName() != "m" || len(resp.GetRawOutputContents()) != 1 {
		t.Fatalf("response %v", resp)
	}
	got := decodeFP32(resp.GetRawOutputContents()[0])
	want := []float32{sim.Checksum(fp32(1, 2)), sim.Checksum(fp32(3, 4))}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("outputs %v, want %v (checksums of the typed rows)", got, want)
	}
}

func TestBatchTooLargeThroughClient(t *testing.T) {
	b := startSim(t, sim.Options{})
	load(t, b, "m", 4, 1)
	var items [][]api.Tensor
	for i := 0; i < 5; i++ {
		items = append(items, item(i, 1))
	}
	_, err := b.client.Infer(context.Background(), "m", items)
	if !errors.Is(err, backends.ErrInvalidInput) || !contains(err.Error(), "max batch 4") {
		t.Fatalf("5 items on max batch 4: %v; want ErrInvalidInput naming the max batch", err)
	}
}

// panicky is an Executor whose model panics on Run.
type panicky struct{}

func (panicky) Models() []string { return []string{"boom"} }
func (panicky) Load(model string, _, _ int) (backends.Model, error) {
	return panickyModel{}, nil
}

type panickyModel struct{}

func (panickyModel) Info() backends.ModelInfo {
	return backends.ModelInfo{Name: "boom", MaxBatch: 8, Concurrency: 1, AnyInputs: true}
}
func (panickyModel) Run(context.Context, []api.Tensor, int) ([]api.Tensor, error) {
	panic("executor bug")
}
func (panickyModel) Close() error { return nil }

func TestExecutorPanicIsInternalAndServerGoesOn(t *testing.T) {
	srv, err := backends.NewServer(panicky{}, backends.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := serve(t, srv)
	load(t, b, "boom", 0, 0)
	for i := 0; i < 2; i++ {
		_, err := b.client.Infer(context.Background(), "boom", [][]api.Tensor{item(1, 1)})
		if !errors.Is(err, backends.ErrBackendFailed) || !contains(err.Error(), "panicked") {
			t.Fatalf("call %d: %v; want ErrBackendFailed saying the executor panicked", i, err)
		}
	}
	if srv.Panics() != 2 {
		t.Errorf("Panics() = %d, want 2", srv.Panics())
	}
}
