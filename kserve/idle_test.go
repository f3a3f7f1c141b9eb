package kserve

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
)

// A connection a client's pool opened and never sent a request on (Go's
// http.Transport does this when another connection freed up first) is closed
// at the read timeout without an answer: an answer there is an unsolicited
// response to the client, which Go logs ("Unsolicited response received on
// idle HTTP channel") and a pipelining client would take for its next
// request's. A request cut short by the timeout is answered 408, naming no
// address.
func TestIdleConnectionClosedWithoutAnAnswer(t *testing.T) {
	exec, err := gateway.NewDAGRunner(gatewaytest.NewFakeRunner(), gatewaytest.SessionsFromYAML(t, serverSessions))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(exec, ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.NewHTTPServer()
	hs.ReadTimeout = 200 * time.Millisecond
	go hs.Serve(l)
	t.Cleanup(func() { hs.Shutdown() })
	for _, tc := range []struct{ sent, want string }{
		{"", ""},
		{"POST /v2/models/s/infer HTTP/1.1\r\nHost: x\r\n", "HTTP/1.1 408 Request Timeout"},
	} {
		sent := tc.sent
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, sent); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		switch {
		case err != nil:
			t.Errorf("sent %q: %v", sent, err)
		case tc.want == "" && len(got) != 0:
			t.Errorf("sent nothing and waited past the read timeout: read %q, want the connection closed with no answer", got)
		case tc.want != "" && (!strings.HasPrefix(string(got), tc.want) || strings.Contains(string(got), "127.0.0.1")):
			t.Errorf("sent half a request and waited past the read timeout: read %q, want %q and no address", got, tc.want)
		}
	}
}
