package process

import (
	"net"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/piccolo-serving/piccolo/tenants"
)

// TestWarnOpenClientPorts: a client port beyond loopback without tenants
// is warned of, once; on loopback, or with tenants, nothing is said.
func TestWarnOpenClientPorts(t *testing.T) {
	lo := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8000}
	wide := &net.TCPAddr{IP: net.IPv4zero, Port: 8001}
	tt, _ := tenants.New(nil)
	for _, c := range []struct {
		name  string
		t     *tenants.Tenants
		addrs []net.Addr
		want  int
	}{
		{"loopback", nil, []net.Addr{lo, lo}, 0},
		{"gRPC beyond loopback", nil, []net.Addr{lo, wide}, 1},
		{"both beyond loopback", nil, []net.Addr{wide, wide}, 1},
		{"with tenants", tt, []net.Addr{wide, wide}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			core, logs := observer.New(zap.WarnLevel)
			warnOpenClientPorts(zap.New(core), c.t, c.addrs...)
			if logs.Len() != c.want {
				t.Errorf("%d warnings, want %d: %v", logs.Len(), c.want, logs.All())
			}
		})
	}
}
