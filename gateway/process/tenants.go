package process

import (
	"context"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/tenants"
)

// startTenants loads the tenants file (--tenants; "": tenants off, nil),
// registers the tenants' metrics on reg and reloads the file on every change
// until ctx ends. A file that does not load is an error here, naming the
// file and what is wrong; on a reload it is logged and the tenants in force
// stay.
func startTenants(ctx context.Context, path string, reg prometheus.Registerer, log *zap.Logger) (*tenants.Tenants, error) {
	if path == "" {
		return nil, nil
	}
	f, err := tenants.Load(path)
	if err != nil {
		return nil, err
	}
	t, err := tenants.New(reg)
	if err != nil {
		return nil, err
	}
	t.Set(f)
	if err := tenants.Watch(ctx, path, t, log, nil); err != nil {
		return nil, err
	}
	log.Info("tenants on: model routes need an API key", zap.String("file", path), zap.Strings("tenants", t.Names()))
	return t, nil
}

// warnOpenClientPorts warns when a client port listens beyond loopback
// without tenants: anyone who reaches it may send any request, at any rate,
// at the high priority class.
func warnOpenClientPorts(log *zap.Logger, t *tenants.Tenants, addrs ...net.Addr) {
	if t != nil {
		return
	}
	for _, a := range addrs {
		if !loopback(a) {
			log.Warn("a client port listens beyond loopback without tenants: any client may infer, at any rate and priority; pass --tenants FILE (docs/security.md, \"Tenants\")",
				zap.String("listen", a.String()))
			return
		}
	}
}
