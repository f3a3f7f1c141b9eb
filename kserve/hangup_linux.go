package kserve

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// hangupListener accepts connections registered with its watcher.
type hangupListener struct {
	net.Listener
	w *hangupWatcher
}

// hangupWatcher is one epoll set holding the accepted sockets for
// EPOLLRDHUP only (edge-triggered: data arriving never wakes it), and the
// goroutine that cancels a connection's context when its peer hangs up.
type hangupWatcher struct {
	epfd    int
	stopped atomic.Bool
	mu      sync.Mutex // conns; taken per connection and per hang-up, never per request
	conns   map[int32]*watchedConn
	next    int32
}

// watchedConn is an accepted connection with the context its requests run
// on, cancelled when its peer hangs up or it is closed.
type watchedConn struct {
	net.Conn
	ctx    context.Context
	cancel context.CancelFunc
	w      *hangupWatcher
	id     int32
	raw    syscall.RawConn
	once   sync.Once
}

func watchHangups(ln net.Listener) net.Listener {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return ln // no watcher: requests run to the end, as without one
	}
	w := &hangupWatcher{epfd: epfd, conns: map[int32]*watchedConn{}}
	go w.run()
	return &hangupListener{Listener: ln, w: w}
}

// Accept registers each TCP connection; others pass through unwatched.
func (l *hangupListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return c, nil
	}
	wc := &watchedConn{Conn: c, w: l.w, raw: raw}
	wc.ctx, wc.cancel = context.WithCancel(context.Background())
	l.w.mu.Lock()
	l.w.next++
	wc.id = l.w.next
	l.w.conns[wc.id] = wc
	l.w.mu.Unlock()
	var regErr error
	if err := raw.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLET, Fd: wc.id}
		regErr = unix.EpollCtl(l.w.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	}); err != nil || regErr != nil {
		l.w.forget(wc) // unwatched: its requests run to the end, as without a watcher
	}
	return wc, nil
}

// Close stops the watcher after the listener.
func (l *hangupListener) Close() error {
	err := l.Listener.Close()
	l.w.stopped.Store(true) // run sees it within its wait's timeout and closes epfd
	return err
}

// Close takes c out of the epoll set before its socket is closed (so that
// its number, reused, cannot reach c) and cancels its context.
func (c *watchedConn) Close() error {
	c.once.Do(func() {
		_ = c.raw.Control(func(fd uintptr) {
			_ = unix.EpollCtl(c.w.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
		})
		c.w.forget(c)
		c.cancel()
	})
	return c.Conn.Close()
}

// watching reports whether connections are still registered: epfd stays
// open until the last is closed, so that its number is not reused under them.
func (w *hangupWatcher) watching() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.conns) > 0
}

// forget takes c out of the watcher's table; a hang-up of c no longer
// reaches its context.
func (w *hangupWatcher) forget(c *watchedConn) {
	w.mu.Lock()
	delete(w.conns, c.id)
	w.mu.Unlock()
}

// run cancels the context of each connection whose peer hung up, until the
// listener is closed. The wait times out every 200 ms to see that.
func (w *hangupWatcher) run() {
	events := make([]unix.EpollEvent, 64)
	for !w.stopped.Load() || w.watching() {
		n, err := unix.EpollWait(w.epfd, events, int(200*time.Millisecond/time.Millisecond))
		if err != nil && err != unix.EINTR {
			break
		}
		for _, ev := range events[:max(n, 0)] {
			if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
				continue
			}
			w.mu.Lock()
			c := w.conns[ev.Fd]
			w.mu.Unlock()
			if c != nil {
				c.cancel()
			}
		}
	}
	unix.Close(w.epfd)
}
