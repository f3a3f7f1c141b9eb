package faults

import (
	"fmt"
	"net"
	"sync"
)

// Listener wraps the gRPC server's listener so that refuse and reset can act
// on sockets: refuse closes lis and every accepted connection, and opens a new
// listening socket on the same address when it is cleared; reset closes the
// connection of the call it cuts. Accept blocks while refusing, so the gRPC
// server keeps serving through it. Call it once, before serving.
func (j *Injector) Listener(lis net.Listener) net.Listener {
	l := &listener{addr: lis.Addr(), inner: lis, conns: map[*conn]struct{}{}, changed: make(chan struct{})}
	j.mu.Lock()
	j.lis = l
	j.mu.Unlock()
	return l
}

type listener struct {
	addr net.Addr // where the socket is reopened

	mu      sync.Mutex
	inner   net.Listener       // nil while refusing
	conns   map[*conn]struct{} // open connections
	changed chan struct{}      // closed and replaced when inner changes or on Close
	closed  bool
}

var _ net.Listener = (*listener)(nil)

// conn removes itself from the listener's table when closed; Read and Write go
// straight to the socket.
type conn struct {
	net.Conn
	l    *listener
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// reset closes the connection with a TCP RST (linger 0), so the peer sees
// "connection reset by peer" rather than an orderly end.
func (c *conn) reset() {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		inner, changed, closed := l.inner, l.changed, l.closed
		l.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		if inner == nil { // refusing: wait for the socket to be reopened
			<-changed
			continue
		}
		c, err := inner.Accept()
		l.mu.Lock()
		if err != nil {
			swapped := l.inner != inner && !l.closed
			l.mu.Unlock()
			if swapped { // closed by refuse, not by the server
				continue
			}
			return nil, err
		}
		if l.inner != inner { // accepted just as refuse began
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		fc := &conn{Conn: c, l: l}
		l.conns[fc] = struct{}{}
		l.mu.Unlock()
		return fc, nil
	}
}

// refuse closes the listening socket and every open connection (on), or opens
// the socket again on the same address (off).
func (l *listener) refuse(on bool) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	if !on {
		if l.inner == nil {
			lis, err := net.Listen(l.addr.Network(), l.addr.String())
			if err != nil {
				l.mu.Unlock()
				return fmt.Errorf("faults: clearing refuse: reopening %s: %w", l.addr, err)
			}
			l.inner = lis
			close(l.changed)
			l.changed = make(chan struct{})
		}
		l.mu.Unlock()
		return nil
	}
	inner := l.inner
	l.inner = nil
	conns := make([]*conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	if inner != nil {
		_ = inner.Close()
	}
	for _, c := range conns {
		c.reset()
	}
	return nil
}

// cut resets the connection whose remote address is addr; false if none.
func (l *listener) cut(addr string) bool {
	l.mu.Lock()
	var found *conn
	for c := range l.conns { // only under reset: a few connections
		if c.RemoteAddr().String() == addr {
			found = c
			break
		}
	}
	l.mu.Unlock()
	if found == nil {
		return false
	}
	found.reset()
	return true
}

func (l *listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	inner := l.inner
	close(l.changed)
	l.mu.Unlock()
	if inner != nil {
		return inner.Close()
	}
	return nil
}

func (l *listener) Addr() net.Addr { return l.addr }
