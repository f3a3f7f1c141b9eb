//go:build !linux

package kserve

import (
	"context"
	"net"
)

// watchedConn is never made off Linux: hang-ups are not watched there.
type watchedConn struct {
	net.Conn
	ctx context.Context
}

func watchHangups(ln net.Listener) net.Listener { return ln }
