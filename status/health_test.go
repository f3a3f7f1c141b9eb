package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func parseSnapshot(t *testing.T, text string) *snapshot {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return &snapshot{at: time.Now(), fams: fams}
}

// The health lines: a down backend, a straggler with its ratio, ejections,
// and the window's batches, retries and hedges.
func TestWriteHealth(t *testing.T) {
	from := parseSnapshot(t, `
piccolo_gateway_backend_up{backend="gpu-0"} 1
piccolo_gateway_batches_sent_total 100
piccolo_gateway_retries_total{reason="transport"} 1
piccolo_gateway_hedges_total{outcome="won"} 0
piccolo_gateway_hedges_total{outcome="lost"} 0
piccolo_gateway_hedge_seconds_total 0
`)
	now := parseSnapshot(t, `
piccolo_gateway_backend_up{backend="gpu-0"} 0
piccolo_gateway_backend_up{backend="gpu-1"} 1
piccolo_gateway_backend_up{backend="gpu-2"} 1
piccolo_gateway_backend_slowness{backend="gpu-0"} 1
piccolo_gateway_backend_slowness{backend="gpu-1"} 1.02
piccolo_gateway_backend_slowness{backend="gpu-2"} 2.31
piccolo_gateway_backend_ejections_total{backend="gpu-0"} 1
piccolo_gateway_batches_sent_total 300
piccolo_gateway_retries_total{reason="transport"} 4
piccolo_gateway_retries_total{reason="not_executed"} 1
piccolo_gateway_hedges_total{outcome="won"} 3
piccolo_gateway_hedges_total{outcome="lost"} 7
piccolo_gateway_hedge_seconds_total 0.25
`)
	var b bytes.Buffer
	writeHealth(&b, from, now)
	want := "backend health: gpu-0 DOWN (ejected 1×), gpu-1 up, gpu-2 up SLOW ×2.3\n" +
		"faults: 200 batches, 4 retried, 10 hedged (5.00%, won 3), hedge machine time 250ms\n\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	writeHealth(&b, nil, parseSnapshot(t, "piccolo_plan_cost 3\n"))
	if b.Len() != 0 {
		t.Errorf("a gateway without the health metrics: %q; want nothing", b.String())
	}
}
