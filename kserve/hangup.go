package kserve

import (
	"context"
	"crypto/tls"
	"math"
	"net"
	"time"

	"github.com/piccolo-serving/piccolo/gateway"
)

// WatchHangups wraps ln so that a connection's requests in flight are
// cancelled when its client closes it: the HTTP handler runs each request
// on the connection's context, which is cancelled when the peer hangs up
// (on Linux, epoll's EPOLLRDHUP on the accepted socket, watched by one
// goroutine for all connections; elsewhere never). fasthttp gives a handler
// no such signal: it reads a connection only between requests. The DAGRunner
// then abandons the request's items: those not yet sent to a backend are
// taken out of the queues and never computed (docs/protocol.md,
// "Cancellation"). A client that half-closes its side after sending (rare
// for HTTP/1.1 clients) counts as gone.
//
// Cost: per connection, one context and an epoll registration; per request,
// a type assertion (connContext). The returned listener's Close stops the
// watcher. Wrap the TCP listener, then TLS (tls.NewListener) over it.
func (s *Server) WatchHangups(ln net.Listener) net.Listener { return watchHangups(ln) }

// connContext returns the context of the connection c (a watched one, under
// TLS or not), or context.Background for any other.
func connContext(c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if wc, ok := c.(*watchedConn); ok {
		return wc.ctx
	}
	return context.Background()
}

// HeaderTimeout is the HTTP request header that gives a request's own
// timeout, as Triton's "timeout" parameter does in the body: a Go duration
// ("250ms", "1.5s") or a bare integer in microseconds (Triton's unit). The
// shorter of it, the parameter and the session's SLO is the deadline.
const HeaderTimeout = "Piccolo-Timeout"

// parseTimeout reads a HeaderTimeout value.
func parseTimeout(v []byte) (time.Duration, error) {
	if us, ok := parseInt(v); ok && us >= 0 {
		return microseconds(us), nil
	}
	d, err := time.ParseDuration(string(v))
	if err != nil || d <= 0 {
		return 0, gateway.BadInput("header %s: %q is not a positive duration (\"250ms\", \"1.5s\") or a number of microseconds", HeaderTimeout, v)
	}
	return d, nil
}

// microseconds converts Triton's timeout unit, saturating.
func microseconds(us int64) time.Duration {
	return time.Duration(min(us, int64(math.MaxInt64/time.Microsecond))) * time.Microsecond
}
