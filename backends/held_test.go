package backends_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/sim"
)

// wide is the width of model m's output rows in these tests: 64 KiB a row.
const wide = 16384

// startHolding serves the test profiles' v100 sim with model m's rows wide
// and a hold store of holdBytes; it returns the backend and its metrics.
func startHolding(t *testing.T, holdBytes int64) (*simBackend, *prometheus.Registry) {
	t.Helper()
	var cfg api.Config
	if err := yaml.Unmarshal([]byte(testProfiles), &cfg); err != nil {
		t.Fatal(err)
	}
	exec, err := sim.New("v100", cfg.Profiles, sim.Options{OutputWidth: map[string]int{"m": wide}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	bm, err := backends.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := backends.NewServer(exec, backends.ServerOptions{Metrics: bm, HoldBytes: holdBytes})
	if err != nil {
		t.Fatal(err)
	}
	b := serve(t, srv)
	load(t, b, "m", 8, 1)
	return b, reg
}

// received reads model m's piccolo_backend_received_bytes_total.
func received(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	v, _ := metricValue(t, reg, "piccolo_backend_received_bytes_total", map[string]string{"model": "m"})
	return v
}

// TestHeldOutputsNamedNotSent: a batch asked to hold its outputs comes back
// with Held set; a second call to the same backend on those outputs sends
// none of their bytes and computes what sending them computes; a call naming
// them to a backend that does not hold them sends every byte.
func TestHeldOutputsNamedNotSent(t *testing.T) {
	ctx := context.Background()
	b, bm := startHolding(t, 8<<20)
	loc := backends.Locality{Backend: "b1", HoldPrefix: "g1-7", HoldMin: 1024}
	first, _, err := b.client.InferLocal(ctx, "m", [][]api.Tensor{item(1, 1), item(2, 1), item(3, 2)}, loc)
	if err != nil {
		t.Fatal(err)
	}
	for i, out := range first {
		h := out[0].Held
		if h == nil || h.Backend != "b1" || h.Key != backends.HeldKey("g1-7", i, 0) || h.Size != len(out[0].Data) {
			t.Fatalf("item %d output Held = %+v; want b1, key %q, size %d", i, h, backends.HeldKey("g1-7", i, 0), len(out[0].Data))
		}
	}
	if got := first[2][0].Shape[0]; got != 2 {
		t.Fatalf("item 2 has %d rows; want 2", got)
	}
	before := received(t, bm)
	held, _, err := b.client.InferLocal(ctx, "m", first, backends.Locality{Backend: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := received(t, bm) - before; got != 0 {
		t.Fatalf("the backend received %v bytes for inputs it holds; want 0", got)
	}
	var heldSize int
	for _, out := range first {
		heldSize += len(out[0].Data)
	}
	if got, _ := metricValue(t, bm, "piccolo_backend_referenced_bytes_total", map[string]string{"model": "m"}); got != float64(heldSize) {
		t.Fatalf("piccolo_backend_referenced_bytes_total %v; want the %d bytes named", got, heldSize)
	}
	if got, _ := metricValue(t, bm, "piccolo_backend_held_bytes", map[string]string{}); got != float64(heldSize) {
		t.Fatalf("piccolo_backend_held_bytes %v; want the %d bytes held", got, heldSize)
	}
	// The same items sent in full, with the Held marks dropped.
	plain := make([][]api.Tensor, len(first))
	var size int
	for i, out := range first {
		plain[i] = []api.Tensor{{Name: out[0].Name, Datatype: out[0].Datatype, Shape: out[0].Shape, Data: out[0].Data}}
		size += len(out[0].Data)
	}
	before = received(t, bm)
	sent, _, err := b.client.InferLocal(ctx, "m", plain, backends.Locality{Backend: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := received(t, bm) - before; got != float64(size) {
		t.Fatalf("the backend received %v bytes for inputs sent in full; want %d", got, size)
	}
	for i := range held {
		if !slices.Equal(held[i][0].Data, sent[i][0].Data) {
			t.Fatalf("item %d: outputs from held inputs differ from those of the same inputs sent", i)
		}
	}
	// Another backend id: Held names b1, so every byte goes.
	before = received(t, bm)
	if _, _, err := b.client.InferLocal(ctx, "m", first, backends.Locality{Backend: "b2"}); err != nil {
		t.Fatal(err)
	}
	if got := received(t, bm) - before; got != float64(size) {
		t.Fatalf("a call for backend b2 sent %v bytes; want all %d", got, size)
	}
}

// TestHeldMixedWithInline: a batch whose items are partly held and partly
// new carries the new ones' bytes only, in item order.
func TestHeldMixedWithInline(t *testing.T) {
	ctx := context.Background()
	b, bm := startHolding(t, 8<<20)
	first, _, err := b.client.InferLocal(ctx, "m", [][]api.Tensor{item(1, 1)}, backends.Locality{Backend: "b1", HoldPrefix: "p", HoldMin: 1})
	if err != nil {
		t.Fatal(err)
	}
	fresh, _, err := b.client.InferLocal(ctx, "m", [][]api.Tensor{item(2, 1)}, backends.Locality{})
	if err != nil {
		t.Fatal(err)
	}
	if fresh[0][0].Held != nil {
		t.Fatal("an output not asked to be held has Held set")
	}
	mixed := [][]api.Tensor{fresh[0], first[0], fresh[0]}
	before := received(t, bm)
	got, _, err := b.client.InferLocal(ctx, "m", mixed, backends.Locality{Backend: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	if n := received(t, bm) - before; n != float64(2*len(fresh[0][0].Data)) {
		t.Fatalf("received %v bytes; want the two inline items' %d", n, 2*len(fresh[0][0].Data))
	}
	want := []float32{sim.Checksum(fresh[0][0].Data), sim.Checksum(first[0][0].Data), sim.Checksum(fresh[0][0].Data)}
	for i := range got {
		if v := decodeFP32(got[i][0].Data)[0]; v != want[i] {
			t.Fatalf("item %d: output %v; want the checksum of its own input %v", i, v, want[i])
		}
	}
}

// TestHeldMissingIsAborted: a key the backend does not keep (evicted: its
// store holds one batch) fails the call with ErrHeldMissing; a backend that
// keeps nothing answers a hold unheld.
func TestHeldMissingIsAborted(t *testing.T) {
	ctx := context.Background()
	b, _ := startHolding(t, 4*wide+100) // room for one 64 KiB output
	loc := backends.Locality{Backend: "b1", HoldPrefix: "a", HoldMin: 1}
	first, _, err := b.client.InferLocal(ctx, "m", [][]api.Tensor{item(1, 1)}, loc)
	if err != nil || first[0][0].Held == nil {
		t.Fatalf("first hold: %v, held %v", err, first)
	}
	loc.HoldPrefix = "b"
	if _, _, err := b.client.InferLocal(ctx, "m", [][]api.Tensor{item(2, 1)}, loc); err != nil {
		t.Fatal(err)
	}
	_, _, err = b.client.InferLocal(ctx, "m", first, backends.Locality{Backend: "b1"})
	if !errors.Is(err, backends.ErrHeldMissing) || !strings.Contains(err.Error(), "a/0/0") {
		t.Fatalf("naming an evicted tensor: %v; want ErrHeldMissing naming a/0/0", err)
	}
	// Two outputs that do not fit together: neither is kept.
	loc.HoldPrefix = "c"
	both, _, err := b.client.InferLocal(ctx, "m", [][]api.Tensor{item(3, 1), item(4, 1)}, loc)
	if err != nil || both[0][0].Held != nil || both[1][0].Held != nil {
		t.Fatalf("a batch larger than the store: err %v, held %v %v; want both unheld", err, both[0][0].Held, both[1][0].Held)
	}

	off, _ := startHolding(t, 0)
	out, _, err := off.client.InferLocal(ctx, "m", [][]api.Tensor{item(1, 1)}, loc)
	if err != nil || out[0][0].Held != nil {
		t.Fatalf("a backend without a store: err %v, held %v; want no error, unheld", err, out[0][0].Held)
	}
}

// TestHostileHoldAndRefs: malformed hold and reference parameters are
// INVALID_ARGUMENT naming the parameter, never a panic or a silent drop.
func TestHostileHoldAndRefs(t *testing.T) {
	ctx := context.Background()
	b, _ := startHolding(t, 1<<20)
	in := item(1, 2)[0]
	str := func(v string) *inference.InferParameter {
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: v}}
	}
	for _, tc := range []struct {
		name       string
		hold, refs string
		raw        []byte
		want       string
	}{
		{"hold without min", "p", "", in.Data, backends.ParamHold},
		{"hold negative min", "p;-1", "", in.Data, "min bytes"},
		{"hold bad rows", "p;0;x", "", in.Data, "item rows"},
		{"hold comma prefix", "p,q;0", "", in.Data, "prefix"},
		{"hold long prefix", strings.Repeat("p", 129) + ";0", "", in.Data, "at most 128"},
		{"refs not a count", "", "abc", in.Data, backends.ParamRefs},
		{"refs past the bytes", "", "16,9999", in.Data, backends.ParamRefs},
		{"refs leave bytes", "", "16", in.Data, "left"},
		{"refs unknown key", "", "@nope,16", in.Data[:16], "held tensor missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tensor := &inference.ModelInferRequest_InferInputTensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape}
			req := &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{tensor}, RawInputContents: [][]byte{tc.raw}}
			if tc.hold != "" {
				req.Parameters = map[string]*inference.InferParameter{backends.ParamHold: str(tc.hold)}
			}
			if tc.refs != "" {
				tensor.Parameters = map[string]*inference.InferParameter{backends.ParamRefs: str(tc.refs)}
			}
			_, err := b.raw.ModelInfer(ctx, req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want an error naming %q", err, tc.want)
			}
		})
	}
	// One held tensor named many times for a one-row input: refused before
	// it is copied more than the row's bytes.
	first, _, err := b.client.InferLocal(ctx, "m", [][]api.Tensor{item(9, 1)}, backends.Locality{Backend: "b1", HoldPrefix: "many", HoldMin: 1})
	if err != nil || first[0][0].Held == nil {
		t.Fatalf("hold: %v", err)
	}
	out := first[0][0]
	tensor := &inference.ModelInferRequest_InferInputTensor{Name: out.Name, Datatype: out.Datatype, Shape: out.Shape,
		Parameters: map[string]*inference.InferParameter{backends.ParamRefs: str(strings.Repeat("@"+out.Held.Key+",", 10000) + "@" + out.Held.Key)}}
	_, err = b.raw.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "m", Inputs: []*inference.ModelInferRequest_InferInputTensor{tensor}, RawInputContents: [][]byte{{}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "more than the 65536 bytes") {
		t.Fatalf("one held row named 10,001 times: %v; want INVALID_ARGUMENT naming the bytes its shape needs", err)
	}
	if b.server.Panics() != 0 {
		t.Fatal("the server panicked")
	}
}
