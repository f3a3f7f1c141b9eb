package kserve

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestHalfSentRequestsAreClosedAfterTheHeaderTimeout: 200 connections each
// holding half-sent headers do not stop a normal request, and each is
// closed once the header timeout passes (408 or a plain close), not after
// the body's minute.
func TestHalfSentRequestsAreClosedAfterTheHeaderTimeout(t *testing.T) {
	const headerTimeout = 500 * time.Millisecond
	ts := startServersWith(t, ServerOptions{Version: "test", HeaderTimeout: headerTimeout})
	addr := strings.TrimPrefix(ts.url, "http://")
	conns := make([]net.Conn, 200)
	start := time.Now()
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Type: appli"); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	if code, _, body := post(t, ts.url+"/v2/models/echo/infer", []byte(goodBody)); code != 200 {
		t.Fatalf("a normal request beside 200 half-sent ones: %d %s", code, body)
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // the body timeout is a minute
		b, _ := io.ReadAll(c)                                   // until the server closes it
		if len(b) > 0 && !strings.HasPrefix(string(b), "HTTP/1.1 408") {
			t.Fatalf("half-sent connection %d answered %q; want 408 or a close", i, b)
		}
	}
	if took := time.Since(start); took < headerTimeout || took > 20*time.Second {
		t.Errorf("half-sent connections closed after %v; want about the header timeout %v", took, headerTimeout)
	}
}
