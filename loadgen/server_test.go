package loadgen

import (
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// testServer is a KServe v2 HTTP endpoint on 127.0.0.1:0 with a configurable
// delay and an error status chosen by request id.
type testServer struct {
	URL   string
	delay time.Duration
	// status, when set, gives the reply status for request id (0 means 200).
	status func(id int) int
	// lean answers 200 without decoding or recording (for benchmarks).
	lean bool
	// metadata is the body of GET /v2/models/{session}; "" answers 404.
	metadata string

	received    atomic.Int64
	inflight    atomic.Int64
	maxInflight atomic.Int64

	mu     sync.Mutex
	bodies []inferBody // decoded JSON part of every infer request
	binary [][]byte    // binary-data tail of every infer request (nil without)
	at     []time.Time // when each infer request was received
}

type inferBody struct {
	ID     string       `json:"id"`
	Inputs []jsonTensor `json:"inputs"`
}

func startServer(t testing.TB, ts *testServer) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: ts.handle, Concurrency: 100000}
	go srv.Serve(ln) //nolint:errcheck // ends at Shutdown
	t.Cleanup(func() { _ = srv.ShutdownWithContext(t.Context()) })
	ts.URL = "http://" + ln.Addr().String()
	return ts
}

// got returns copies of the decoded bodies and binary tails received so far.
func (ts *testServer) got() ([]inferBody, [][]byte) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]inferBody(nil), ts.bodies...), append([][]byte(nil), ts.binary...)
}

func (ts *testServer) handle(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	if !strings.HasPrefix(path, "/v2/models/") {
		ctx.Error(`{"error":"no such path"}`, fasthttp.StatusNotFound)
		return
	}
	if !strings.HasSuffix(path, "/infer") {
		if ts.metadata == "" {
			ctx.Error(`{"error":"unknown model"}`, fasthttp.StatusNotFound)
			return
		}
		ctx.SetBodyString(ts.metadata)
		return
	}
	if ts.lean {
		ctx.SetBodyString(`{"outputs":[]}`)
		return
	}
	ts.received.Add(1)
	n := ts.inflight.Add(1)
	defer ts.inflight.Add(-1)
	for {
		m := ts.maxInflight.Load()
		if n <= m || ts.maxInflight.CompareAndSwap(m, n) {
			break
		}
	}
	body := ctx.PostBody()
	var tail []byte
	if hl := ctx.Request.Header.Peek("Inference-Header-Content-Length"); hl != nil {
		l, err := strconv.Atoi(string(hl))
		if err != nil || l > len(body) {
			ctx.Error(`{"error":"bad Inference-Header-Content-Length"}`, fasthttp.StatusBadRequest)
			return
		}
		body, tail = body[:l], append([]byte(nil), body[l:]...)
	}
	var b inferBody
	if err := json.Unmarshal(body, &b); err != nil {
		ctx.Error(`{"error":"bad json"}`, fasthttp.StatusBadRequest)
		return
	}
	ts.mu.Lock()
	ts.bodies = append(ts.bodies, b)
	ts.binary = append(ts.binary, tail)
	ts.at = append(ts.at, time.Now())
	ts.mu.Unlock()
	time.Sleep(ts.delay)
	if ts.status != nil {
		id, _ := strconv.Atoi(b.ID)
		if s := ts.status(id); s != 0 {
			ctx.Error(`{"error":"injected"}`, s)
			return
		}
	}
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"model_name":"s","id":"` + b.ID + `","outputs":[]}`)
}

func mustBodies(t testing.TB, ts *testServer) []inferBody {
	t.Helper()
	b, _ := ts.got()
	if len(b) == 0 {
		t.Fatal("the server received no infer request")
	}
	return b
}
