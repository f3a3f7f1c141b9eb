package cluster_test

import (
	"context"
	"testing"

	"github.com/piccolo-serving/piccolo/internal/consultest"
)

// TestCalibrationsKV: each gateway's calibration is kept under its own key
// in a real Consul agent's KV; Calibrations lists the asking gateway's first.
func TestCalibrationsKV(t *testing.T) {
	agent := consultest.Start(t)
	c := newClient(t, agent.Addr())
	ctx := context.Background()
	for gw, v := range map[string]string{"a": `{"from":"a"}`, "b": `{"from":"b"}`, "c": `{"from":"c"}`} {
		if err := c.PutCalibration(ctx, gw, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Calibrations(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, d := range got {
		s = append(s, string(d))
	}
	if len(s) != 3 || s[0] != `{"from":"b"}` || s[1] != `{"from":"a"}` || s[2] != `{"from":"c"}` {
		t.Errorf("Calibrations(b) = %v; want b's first, then a's and c's", s)
	}
}
