package faults

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestListenerLifecycle: accepted connections leave the table when closed;
// refuse makes dials fail while Accept waits; clearing it reopens the same
// address; Close ends Accept with net.ErrClosed, even while refusing.
func TestListenerLifecycle(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	j, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := j.Listener(inner).(*listener)
	accepted := make(chan net.Conn)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			accepted <- c
		}
	}()
	addr := l.Addr().String()
	dial := func() (net.Conn, error) { return net.DialTimeout("tcp", addr, time.Second) }
	for i := 0; i < 3; i++ {
		c, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		(<-accepted).Close()
	}
	l.mu.Lock()
	n := len(l.conns)
	l.mu.Unlock()
	if n != 0 {
		t.Errorf("%d closed connections still in the table", n)
	}

	if err := j.Set(Set{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	if c, err := dial(); err == nil {
		c.Close()
		t.Fatal("dial succeeded while refusing")
	}
	select {
	case err := <-acceptErr:
		t.Fatalf("Accept ended while refusing: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := j.Clear(); err != nil {
		t.Fatal(err)
	}
	c, err := dial()
	if err != nil {
		t.Fatalf("dial after clearing refuse: %v", err)
	}
	defer c.Close()
	(<-accepted).Close()

	if err := j.Set(Set{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-acceptErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not end after Close")
	}
	if err := j.Clear(); err != nil {
		t.Errorf("clearing refuse after Close: %v", err)
	}
}
