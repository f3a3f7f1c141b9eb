package profiler

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
)

// reader is a KServe v2 server whose model "ocr" reads every image as the text
// "total due 42" in two lines (a fake behind the generated interface).
type reader struct {
	inference.UnimplementedGRPCInferenceServiceServer
}

func (reader) ModelInfer(_ context.Context, r *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	var raw []byte
	for _, line := range []string{"total due", "42"} {
		raw = binary.LittleEndian.AppendUint32(raw, uint32(len(line)))
		raw = append(raw, line...)
	}
	return &inference.ModelInferResponse{
		ModelName:         r.GetModelName(),
		Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "text", Datatype: "BYTES", Shape: []int64{2}}},
		RawOutputContents: [][]byte{raw},
	}, nil
}

func serveReader(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(s, reader{})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// TestMeasureAccuracy: word accuracy over a labelled set through a real gRPC
// server, and the accuracy written into the variant's profile so that the
// loader gives it to a variant without one.
func TestMeasureAccuracy(t *testing.T) {
	dir := t.TempDir()
	labels := "# file\ttext\na.png\ttotal due 42\nb.png\ttotal due 43\n\nc.png\tpaid\n"
	for _, f := range []string{"a.png", "b.png", "c.png"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("not really a png"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, LabelsFile), []byte(labels), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := MeasureAccuracy(context.Background(), AccuracyOptions{Target: serveReader(t), Model: "ocr", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if res.Images != 3 || res.Words != 7 || res.Matched != 5 || res.ExactImages != 1 {
		t.Errorf("got %+v; want 3 images, 7 words, 5 matched, 1 exact", res)
	}

	profiles := "# measured\nhardware:\n  - {name: cpu, price: 1}\nprofiles:\n  - model: small\n    hardware: cpu\n    entries: [{batch: 1, duration: 5ms}]\n" +
		"sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, variants: [{model: small}]}\n"
	out, err := SetAccuracy([]byte(profiles), "small", "", res.Accuracy())
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadWritten(t, out)
	if got := cfg.Sessions[0].Modules[0].Variants[0].Accuracy; got < 0.714 || got > 0.715 {
		t.Errorf("variant accuracy %v; want 5/7 from its profile", got)
	}
	if _, err := SetAccuracy([]byte(profiles), "large", "", 0.9); !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "no profile of model large") {
		t.Errorf("unknown model: %v", err)
	}
}

func TestLoadLabelledErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadLabelled(dir); !errors.Is(err, ErrBadOptions) {
		t.Errorf("missing labels: %v", err)
	}
	os.WriteFile(filepath.Join(dir, LabelsFile), []byte("a.png total\n"), 0o644)
	if _, err := LoadLabelled(dir); !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), LabelsFile+":1: want <file name>\\t<text>") {
		t.Errorf("line without a tab: %v", err)
	}
}

// TestWordAccuracy: each recognised word matches one expected word at most,
// in any order, case counting.
func TestWordAccuracy(t *testing.T) {
	for _, c := range []struct {
		want, got []string
		n         int
	}{
		{[]string{"a", "b", "c"}, []string{"c", "a", "b"}, 3},
		{[]string{"a", "a"}, []string{"a"}, 1},
		{[]string{"a"}, []string{"a", "a", "x"}, 1},
		{[]string{"Exit"}, []string{"exit"}, 0},
	} {
		if n := WordAccuracy(c.want, c.got); n != c.n {
			t.Errorf("WordAccuracy(%v, %v) = %d; want %d", c.want, c.got, n, c.n)
		}
	}
}

// TestSetJointAccuracy: a measured accuracy written as a variant
// combination's joint accuracy is added to the session, then replaced for the
// same combination, keeping comments; the loader gives it to the planner's
// rule. A session not in the file, and malformed --joint pairs, are errors.
func TestSetJointAccuracy(t *testing.T) {
	const doc = "# measured\nhardware:\n  - {name: cpu, price: 1}\nprofiles:\n" +
		"  - {model: big, hardware: cpu, entries: [{batch: 1, duration: 5ms}]}\n" +
		"  - {model: small, hardware: cpu, entries: [{batch: 1, duration: 2ms}]}\n" +
		"sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, variants: [{model: big, accuracy: 0.9}, {model: small, accuracy: 0.8}]}\n"
	combo, err := ParseJoint("a=small")
	if err != nil {
		t.Fatal(err)
	}
	out, err := SetJointAccuracy([]byte(doc), "s", combo, 0.7)
	if err != nil {
		t.Fatal(err)
	}
	if out, err = SetJointAccuracy(out, "s", combo, 0.75); err != nil {
		t.Fatal(err)
	}
	cfg := loadWritten(t, out)
	if js := cfg.Sessions[0].JointAccuracy; len(js) != 1 || js[0].Variants["a"] != "small" || js[0].Accuracy != 0.75 {
		t.Errorf("joint accuracies %+v; want one, a=small at 0.75 (the second write replacing the first)", js)
	}
	if _, err := SetJointAccuracy([]byte(doc), "t", combo, 0.7); !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "no session t in the file") {
		t.Errorf("unknown session: %v", err)
	}
	for _, bad := range []string{"a", "a=", "=small", "a=small,a=big"} {
		if _, err := ParseJoint(bad); !errors.Is(err, ErrBadOptions) {
			t.Errorf("--joint %q: %v; want an error", bad, err)
		}
	}
	// The command refuses bad --joint flags before it measures anything:
	// the labelled set named does not exist, and the flag's error comes first.
	for _, c := range []struct {
		o    CommandOptions
		want string
	}{
		{CommandOptions{Joint: "a=small"}, "--joint: give --profile-file"},
		{CommandOptions{Joint: "a=small", ProfileFile: "p.yaml", Variant: "small"}, "--joint and --variant: give one"},
		{CommandOptions{Joint: "a", ProfileFile: "p.yaml"}, "want MODULE=VARIANT pairs"},
	} {
		c.o.Model, c.o.AccuracyDir, c.o.Target = "s", filepath.Join(t.TempDir(), "none"), "127.0.0.1:1"
		if err := Command(context.Background(), c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want %q", c.o, err, c.want)
		}
	}
}

// loadWritten loads a config file the profiler wrote, whose first line was
// the comment "# measured": the comment must be kept and the file must load.
func loadWritten(t *testing.T, out []byte) *api.Config {
	t.Helper()
	if !strings.Contains(string(out), "# measured") {
		t.Errorf("the comment was lost:\n%s", out)
	}
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "p.yaml", Data: out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return cfg
}
