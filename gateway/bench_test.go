package gateway_test

import (
	"context"
	"testing"

	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
)

// BenchmarkDAGRunnerInfer is the DAGRunner's own cost per request on a two-module
// chain with an instant runner.
func BenchmarkDAGRunnerInfer(b *testing.B) {
	exec, err := gateway.NewDAGRunner(gatewaytest.EchoRunner{}, gatewaytest.SessionsFromYAML(b, `
sessions:
  - name: chain
    slo: 1s
    modules:
      - {name: a, model: m, rate: 1}
      - {name: b, model: m, rate: 1, after: [a]}
`))
	if err != nil {
		b.Fatal(err)
	}
	req := gateway.InferRequest{Inputs: gatewaytest.Input(1, 2, 3)}
	b.ReportAllocs()
	for b.Loop() {
		var resp gateway.InferResponse
		if err := exec.Infer(context.Background(), "chain", &req, &resp); err != nil {
			b.Fatal(err)
		}
	}
}
