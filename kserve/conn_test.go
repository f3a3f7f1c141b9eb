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

// TestConnectionsPerAddressAreCapped: past MaxConnsPerIP open connections
// from one address, the next is closed unread; once one closes, a new one
// is served.
func TestConnectionsPerAddressAreCapped(t *testing.T) {
	ts := startServersWith(t, ServerOptions{Version: "test", MaxConnsPerIP: 3})
	addr := strings.TrimPrefix(ts.url, "http://")
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// roundTrip sends one GET on c and returns the status line, "" when
	// the server closed c instead.
	roundTrip := func(c net.Conn) string {
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(c, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return ""
		}
		b := make([]byte, 12)
		if _, err := io.ReadFull(c, b); err != nil {
			return ""
		}
		return string(b)
	}
	held := []net.Conn{dial(), dial(), dial()}
	for _, c := range held {
		defer c.Close()
		if got := roundTrip(c); got != "HTTP/1.1 200" {
			t.Fatalf("a connection within the cap: %q", got)
		}
	}
	over := dial()
	defer over.Close()
	if got := roundTrip(over); got != "" {
		t.Errorf("the 4th connection with a cap of 3 answered %q; want it closed", got)
	}
	held[0].Close()
	for i := 0; ; i++ { // the server sees the close asynchronously
		c := dial()
		got := roundTrip(c)
		c.Close()
		if got == "HTTP/1.1 200" {
			break
		}
		if i == 100 {
			t.Fatal("no connection served after one of the three closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
