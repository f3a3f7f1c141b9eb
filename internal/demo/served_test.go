package demo

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/dispatcher"
)

// The demo plans with the flush, dispatch and admission its gateway is given
// through --gateway-arg, and passes the gateway's other flags through
// unread; a value the gateway would refuse is refused before anything
// starts, naming what is allowed.
func TestServedByReadsTheGatewayArgs(t *testing.T) {
	s, err := servedBy([]string{"--slack=0", "--flush=deadline", "--invocation-slack", "--dispatch", "rr", "--admission=false", "--hedge-budget", "0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if s.flush != dispatcher.FlushDeadline || s.dispatch == nil || s.dispatch.Name() != "rr" || s.admission {
		t.Errorf("served = flush %v, dispatch %v, admission %v; want deadline, rr, false", s.flush, s.dispatch, s.admission)
	}
	s, err = servedBy(nil)
	if err != nil || s.flush != nil || s.dispatch != nil || !s.admission {
		t.Errorf("no args: %+v, %v; want the gateway's defaults (nil flush and dispatch, admission on)", s, err)
	}
	for _, bad := range [][]string{{"--flush=never"}, {"--dispatch=random"}, {"--admission=maybe"}} {
		_, err := servedBy(bad)
		if err == nil || !strings.Contains(err.Error(), bad[0][2:strings.Index(bad[0], "=")]) {
			t.Errorf("servedBy(%v) = %v; want an error naming the flag", bad, err)
		}
	}
	_, err = servedBy([]string{"--flush=never"})
	if err == nil || !strings.Contains(err.Error(), "idle") || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("a bad flush: %v; want the allowed names (idle, deadline)", err)
	}
	if _, err := Run(context.Background(), Options{Log: io.Discard, OutDir: t.TempDir(), GatewayArgs: []string{"--flush=never"}}); err == nil || !strings.Contains(err.Error(), "flush") {
		t.Errorf("Run with --flush=never: %v; want the flag's error before anything starts", err)
	}
}
