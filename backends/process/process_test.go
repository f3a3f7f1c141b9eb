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

// TestSimFanOut: the sim executor's fan-out models are the parents' models
// (Model or every Variant) of the modules with a fanout, with the normalised
// distribution; two sessions asking one model for different ones fail naming
// both modules, the same one twice is fine.
func TestSimFanOut(t *testing.T) {
	counts := api.FanOut{{Items: 12, Share: 9}, {Items: 0, Share: 120}, {Items: 1, Share: 310}}
	norm, _ := counts.Normalized()
	session := func(name string, f api.FanOut, parent api.Module) api.Session {
		return api.Session{Name: name, Modules: []api.Module{
			parent,
			{Name: "cls", Model: "classifier", Rate: 10, After: []string{parent.Name}, FanOut: f},
			{Name: "tail", Model: "tail", Rate: 10, After: []string{"cls"}},
		}}
	}
	det := api.Module{Name: "det", Model: "detector", Rate: 10}
	ssd := api.Module{Name: "find", Variants: []api.Variant{{Model: "ssd-small"}, {Model: "ssd-large"}}, Rate: 10}

	got, err := simFanOut(&api.Config{Sessions: []api.Session{
		session("a", counts, det),
		session("b", norm, det), // the same distribution, normalised
		session("c", api.FanOut{{Items: 2, Share: 1}}, ssd),
		{Name: "plain", Modules: []api.Module{{Name: "m", Model: "plain", Rate: 1}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]api.FanOut{"detector": norm, "ssd-small": {{Items: 2, Share: 1}}, "ssd-large": {{Items: 2, Share: 1}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fan-out models (-want +got):\n%s", diff)
	}
	if got, err := simFanOut(&api.Config{}); err != nil || len(got) != 0 {
		t.Errorf("no sessions: %v, %v; want none", got, err)
	}

	_, err = simFanOut(&api.Config{Sessions: []api.Session{
		session("a", counts, det),
		session("b", api.FanOut{{Items: 3, Share: 1}}, det),
	}})
	if err == nil || !strings.Contains(err.Error(), `"detector"`) || !strings.Contains(err.Error(), "a/cls") || !strings.Contains(err.Error(), "b/cls") {
		t.Errorf("conflicting distributions: %v; want an error naming detector, a/cls and b/cls", err)
	}
	bad := session("a", counts, det)
	bad.Modules[1].After = []string{"det", "tail"}
	if _, err := simFanOut(&api.Config{Sessions: []api.Session{bad}}); err == nil || !strings.Contains(err.Error(), "a/cls") || !strings.Contains(err.Error(), "exactly one parent") {
		t.Errorf("two parents: %v; want an error naming a/cls and asking for one parent", err)
	}
}
