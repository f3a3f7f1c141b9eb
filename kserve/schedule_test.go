package kserve

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
)

// Triton's schedule policy parameters, in JSON, in gRPC and (the timeout)
// in the Piccolo-Timeout header.
func TestSchedulePolicyParameters(t *testing.T) {
	const in = `"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]`
	for _, tc := range []struct {
		body     string
		timeout  time.Duration
		priority int64
		bad      bool
	}{
		{`{"parameters":{"timeout":250000,"priority":1},` + in + `}`, 250 * time.Millisecond, 1, false},
		{`{"parameters":{"priority":3},` + in + `}`, 0, 3, false},
		{`{"parameters":{"timeout":-1},` + in + `}`, 0, 0, true},
		{`{"parameters":{"priority":1.5},` + in + `}`, 0, 0, true},
		{`{"parameters":{"timeout":"1s"},` + in + `}`, 0, 0, true},
	} {
		var req gateway.InferRequest
		err := DecodeInferRequest([]byte(tc.body), &req)
		if tc.bad {
			if !errors.Is(err, gateway.ErrBadInput) {
				t.Errorf("%s: %v, want ErrBadInput", tc.body, err)
			}
			continue
		}
		if err != nil || req.Timeout != tc.timeout || req.Priority != tc.priority {
			t.Errorf("%s: timeout %v priority %d err %v; want %v, %d", tc.body, req.Timeout, req.Priority, err, tc.timeout, tc.priority)
		}
	}
	for v, want := range map[string]time.Duration{"250ms": 250 * time.Millisecond, "1.5s": 1500 * time.Millisecond, "2000": 2 * time.Millisecond} {
		if got, err := parseTimeout([]byte(v)); err != nil || got != want {
			t.Errorf("%s: %q = %v, %v; want %v", HeaderTimeout, v, got, err, want)
		}
	}
	for _, v := range []string{"soon", "-1s", "0s"} {
		if _, err := parseTimeout([]byte(v)); !errors.Is(err, gateway.ErrBadInput) {
			t.Errorf("%s: %q: %v, want ErrBadInput", HeaderTimeout, v, err)
		}
	}
	var r gateway.InferRequest
	params := map[string]*inference.InferParameter{
		"timeout":  {ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: 5000}},
		"priority": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 1}},
	}
	if err := grpcSchedule(params, &r); err != nil || r.Timeout != 5*time.Millisecond || r.Priority != 1 {
		t.Errorf("gRPC: timeout %v priority %d err %v; want 5ms, 1", r.Timeout, r.Priority, err)
	}
	params["priority"] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: "high"}}
	if err := grpcSchedule(params, &r); !errors.Is(err, gateway.ErrBadInput) {
		t.Errorf("gRPC priority as a string: %v, want ErrBadInput", err)
	}
}

// A client that closes its connection while its request waits ends the
// request at once (its context is cancelled; the runner's items are
// abandoned), not at its 30 s deadline.
func TestHangUpCancelsTheRequest(t *testing.T) {
	f := gatewaytest.NewFakeRunner()
	f.Hang["hold"] = true
	exec, err := gateway.NewDAGRunner(f, gatewaytest.SessionsFromYAML(t, "sessions:\n  - {name: held, slo: 30s, modules: [{name: hold, model: m, rate: 10}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(exec, ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.NewHTTPServer()
	go hs.Serve(srv.WatchHangups(hl))
	t.Cleanup(func() { hs.Shutdown() })
	c, err := net.Dial("tcp", hl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body := `{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}`
	fmt.Fprintf(c, "POST /v2/models/held/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	deadline := time.Now().Add(5 * time.Second)
	for f.Inflight.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the runner")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	c.Close()
	for f.Inflight.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request still runs 5 s after its client hung up (its deadline is 30 s away)")
		}
		time.Sleep(time.Millisecond)
	}
}
