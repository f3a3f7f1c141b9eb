package backends

import (
	"context"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
)

// TestResponseTiming: the parameters a Server writes read back as the same
// Timing; a response without them (an older backend, a Triton server) or
// with a value that is no duration reads as not reported.
func TestResponseTiming(t *testing.T) {
	want := Timing{Queue: 3 * time.Millisecond, Compute: 7 * time.Millisecond}
	for _, tc := range []struct {
		name string
		resp *inference.ModelInferResponse
		want Timing
	}{
		{"reported", &inference.ModelInferResponse{Parameters: timingParams(want, false)}, want},
		{"reported, fan-out", &inference.ModelInferResponse{Parameters: timingParams(want, true)}, want},
		{"none", &inference.ModelInferResponse{}, Timing{}},
		{"fan-out only", &inference.ModelInferResponse{Parameters: fanOutParams}, Timing{}},
		{"negative compute", &inference.ModelInferResponse{Parameters: timingParams(Timing{Queue: 1, Compute: -5}, false)}, Timing{}},
		{"negative queue", &inference.ModelInferResponse{Parameters: timingParams(Timing{Queue: -1, Compute: 5}, false)}, Timing{Compute: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := responseTiming(tc.resp); got != tc.want {
				t.Errorf("responseTiming = %+v; want %+v", got, tc.want)
			}
		})
	}
	if p := timingParams(want, true); !p[ParamFanOut].GetBoolParam() {
		t.Error("fan-out mark lost with the timing parameters")
	}
}

type plainModel struct{ d time.Duration }

func (plainModel) Info() ModelInfo { return ModelInfo{Name: "plain"} }
func (plainModel) Close() error    { return nil }
func (m plainModel) Run(context.Context, []api.Tensor, int) ([]api.Tensor, error) {
	time.Sleep(m.d)
	return nil, nil
}

// TestRunTimedPlainModel: a Model that does not split its time reports all of
// Run as Compute.
func TestRunTimedPlainModel(t *testing.T) {
	_, tm, err := RunTimed(context.Background(), plainModel{d: 2 * time.Millisecond}, nil, 1)
	if err != nil || tm.Queue != 0 || tm.Compute < 2*time.Millisecond {
		t.Fatalf("RunTimed = %+v, %v; want Queue 0, Compute ≥ 2ms", tm, err)
	}
}
