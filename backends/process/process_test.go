package process

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/membership"
)

func TestBackendMetricsAddr(t *testing.T) {
	for _, tc := range []struct{ flag, grpc, want, err string }{
		{"auto", "127.0.0.1:9101", "127.0.0.1:10101", ""},
		{"auto", "127.0.0.1:0", "127.0.0.1:0", ""},
		{"auto", "[::1]:9101", "[::1]:10101", ""},
		{"off", "127.0.0.1:9101", "", ""},
		{"", "127.0.0.1:9101", "", ""},
		{"0.0.0.0:9400", "127.0.0.1:9101", "0.0.0.0:9400", ""},
		{"auto", "127.0.0.1:65000", "", "over 65535"},
	} {
		got, err := MetricsAddr(tc.flag, tc.grpc)
		if got != tc.want || (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("MetricsAddr(%q, %q) = %q, %v; want %q, error containing %q", tc.flag, tc.grpc, got, err, tc.want, tc.err)
		}
	}
}

func TestBackendMemberDefaultID(t *testing.T) {
	cfg := &api.Config{Hardware: []api.Hardware{{Name: "t4", Price: 0.53}}}
	m := Member(Options{Hardware: "t4"}, cfg, nil, []string{"m"}, "127.0.0.1:9101")
	want := membership.Member{ID: "t4-127.0.0.1-9101", Address: "127.0.0.1:9101", Hardware: "t4", Price: 0.53, Models: []string{"m"}}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("member (-want +got):\n%s", diff)
	}
}

// TestBuiltinExecutors checks the registry --executor reads: its names, and
// that Run looks the executor up in Options.Executors, naming the allowed ones
// when it is not there.
func TestBuiltinExecutors(t *testing.T) {
	if got := BuiltinExecutors().String(); got != "builtin, ocr, onnx, sim" {
		t.Errorf("BuiltinExecutors() = %q", got)
	}
	err := Run(context.Background(), Options{Executor: "tpu", Hardware: "t4"}, nil)
	if err == nil || !strings.Contains(err.Error(), `unknown executor "tpu"; allowed: builtin, ocr, onnx, sim`) {
		t.Errorf("Run(--executor tpu) = %v; want the allowed names", err)
	}
	errMine := errors.New("built by the test's own kind")
	mine, err := BuiltinExecutors().With(NewExecutorKind("mine", func(Options, *api.Config) (backends.Executor, error) {
		return nil, errMine
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := Run(context.Background(), Options{Executor: "mine", Hardware: "t4", Executors: mine}, nil); !errors.Is(err, errMine) {
		t.Errorf("Run(--executor mine) = %v; want the test kind's own error", err)
	}
	if _, err := BuiltinExecutors().With(NewExecutorKind("sim", nil)); err == nil {
		t.Error("a second kind called sim was accepted")
	}
}
