package kserve

import (
	"net"
	"sync"

	"github.com/valyala/fasthttp"
)

// ipConns caps the open HTTP connections of each client address
// (ServerOptions.MaxConnsPerIP) through fasthttp's ConnState hook: a
// connection past the cap is closed as soon as it is accepted, before a
// byte of it is read. Our own, not fasthttp's MaxConnsPerIP: that wraps
// every connection in a per-IP type of its own, which hides the connection
// WatchHangups made from the handler (so a hang-up would no longer cancel
// its request), and whose Close leaves a nil connection to fasthttp's
// error writes. Cost: one lock and map update per connection opened and
// closed, nothing per request.
type ipConns struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func newIPConns(max int) *ipConns { return &ipConns{max: max, n: map[string]int{}} }

// state is the server's ConnState hook.
func (p *ipConns) state(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateNew:
		ip := addrIP(c.RemoteAddr())
		p.mu.Lock()
		p.n[ip]++
		over := p.n[ip] > p.max
		p.mu.Unlock()
		if over {
			_ = c.Close()
		}
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		ip := addrIP(c.RemoteAddr())
		p.mu.Lock()
		if p.n[ip]--; p.n[ip] <= 0 {
			delete(p.n, ip)
		}
		p.mu.Unlock()
	}
}

// addrIP is the client address of a connection without its port.
func addrIP(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return string(ta.IP)
	}
	return a.String()
}
