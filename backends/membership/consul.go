package membership

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	capi "github.com/hashicorp/consul/api"
	"go.uber.org/zap"
)

// ServiceName is the Consul service every backend registers as.
const ServiceName = "piccolo-backend"

// ConsulOptions tune a Consul watcher. The zero value is the default.
type ConsulOptions struct {
	// Service is the Consul service to watch (default ServiceName).
	Service string
	// WaitTime bounds one blocking query (default 30 s; Consul adds up to
	// WaitTime/16 of jitter). A change ends the query at once.
	WaitTime time.Duration
	// MaxBackoff caps the wait between failed queries (default 2 s). The wait
	// doubles from 50 ms with each failure, jittered down to half.
	MaxBackoff time.Duration
	// Logger says when Consul becomes unreachable and when it is back (once
	// each, not per retry), and names the registrations left out (once per
	// change). Default: no logs.
	Logger *zap.Logger
	// Auth is the ACL token and TLS of the Consul client (NewClient).
	Auth ConsulAuth
	// BackendToken, when set, is the credential every registration must
	// carry: meta MetaAuth, the HMAC of its id and address made with this
	// token (Credential). A registration without it, or with one made for
	// another id or address or with another token, is left out (named in
	// Snapshot.Err and logged): a pod that can reach Consul cannot join as
	// a backend without the token.
	BackendToken string
}

// Consul is the membership of the backends registered in Consul as service
// ServiceName whose health checks pass (membership `consul`). It watches the
// health endpoint with blocking queries, so a registration, a deregistration
// or a check going critical reaches fn as soon as the agent knows it. When
// Consul is unreachable it gives one Stale snapshot holding the last members,
// retries with backoff, and gives a fresh snapshot when Consul answers again.
type Consul struct {
	client     *capi.Client
	addr       string
	token      string // ConsulOptions.BackendToken
	service    string
	waitTime   time.Duration
	maxBackoff time.Duration
	log        *zap.Logger
}

var _ Membership = (*Consul)(nil)

// NewConsul returns a watcher of the Consul agent at addr (host:port of its
// HTTP API, or an http:// URL), its client made by NewClient with o.Auth. It
// does not contact Consul: Watch does.
func NewConsul(addr string, o ConsulOptions) (*Consul, error) {
	client, err := NewClient(addr, o.Auth)
	if err != nil {
		return nil, err
	}
	c := &Consul{client: client, addr: addr, token: o.BackendToken, service: o.Service, waitTime: o.WaitTime, maxBackoff: o.MaxBackoff, log: o.Logger}
	if c.service == "" {
		c.service = ServiceName
	}
	if c.waitTime <= 0 {
		c.waitTime = 30 * time.Second
	}
	if c.maxBackoff <= 0 {
		c.maxBackoff = 2 * time.Second
	}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	return c, nil
}

// ConsulAuth is how a Consul client proves itself and checks the agent: an
// ACL token and TLS. Every field left empty is taken from the environment
// as the consul CLI takes it (consul/api's DefaultConfig):
// CONSUL_HTTP_TOKEN (or CONSUL_HTTP_TOKEN_FILE), CONSUL_CACERT,
// CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY, CONSUL_HTTP_SSL.
type ConsulAuth struct {
	Token    string // --consul-token: the ACL token sent with every call
	CAFile   string // --consul-cacert: PEM CA that signed the agent's certificate
	CertFile string // --consul-client-cert: PEM client certificate (mutual TLS)
	KeyFile  string // --consul-client-key: its PEM private key
	// TLS (--consul-tls) speaks HTTPS to the agent; a CA or client
	// certificate given turns it on too, as does an https:// address.
	TLS bool
}

// NewClient returns a consul/api client of the agent at addr (host:port of its
// HTTP API, or an http:// or https:// URL) with auth over the environment
// (ConsulAuth). Every Consul client of Piccolo is made here (the membership
// watcher, Register, the cluster mode's KV, lock and scheduler), so the
// gateway, the scheduler and the backends read the address, the ACL token
// and TLS the same way. Errors name the flag: a certificate without its key,
// a TLS file that does not load.
func NewClient(addr string, auth ConsulAuth) (*capi.Client, error) {
	if addr == "" {
		return nil, errors.New("consul address is empty: want host:port of the agent's HTTP API, such as 127.0.0.1:8500")
	}
	cfg := capi.DefaultConfig() // the CONSUL_* environment
	cfg.Address = addr
	if auth.Token != "" {
		cfg.Token, cfg.TokenFile = auth.Token, ""
	}
	if auth.CAFile != "" {
		cfg.TLSConfig.CAFile = auth.CAFile
	}
	if auth.CertFile != "" || auth.KeyFile != "" {
		if auth.CertFile == "" || auth.KeyFile == "" {
			return nil, fmt.Errorf("consul %s: --consul-client-cert %q and --consul-client-key %q: give both or neither", addr, auth.CertFile, auth.KeyFile)
		}
		cfg.TLSConfig.CertFile, cfg.TLSConfig.KeyFile = auth.CertFile, auth.KeyFile
	}
	if auth.TLS || cfg.TLSConfig.CAFile != "" || cfg.TLSConfig.CertFile != "" {
		cfg.Scheme = "https"
	}
	client, err := capi.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul %s: %w", addr, err)
	}
	return client, nil
}

// Addr returns the agent address the watcher queries.
func (c *Consul) Addr() string { return c.addr }

// Watch implements Membership: fn gets the passing instances of the service,
// first after the first query (a Stale, empty snapshot if Consul does not
// answer), then on every change of members or of staleness.
func (c *Consul) Watch(ctx context.Context, fn func(Snapshot)) error {
	var (
		last     Snapshot
		have     bool
		index    uint64
		failures int
	)
	for ctx.Err() == nil {
		q := &capi.QueryOptions{WaitIndex: index, WaitTime: c.waitTime}
		// Bound the request too, in case the agent hangs instead of failing.
		qctx, cancel := context.WithTimeout(ctx, c.waitTime+c.waitTime/16+5*time.Second)
		entries, meta, err := c.client.Health().Service(c.service, "", true, q.WithContext(qctx))
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			failures++
			index = 0 // a restarted agent counts from scratch: do not block on the old index
			if !have || !last.Stale {
				c.log.Warn("consul unreachable; keeping the last membership",
					zap.String("consul", c.addr), zap.Int("members", len(last.Members)), zap.Error(err))
				last = Snapshot{Members: last.Members, Stale: true, At: time.Now(), Source: "consul",
					Err: fmt.Errorf("consul %s: %w", c.addr, err)}
				have = true
				fn(last)
			}
			if !Sleep(ctx, Backoff(failures, c.maxBackoff)) {
				return nil
			}
			continue
		}
		if failures > 0 {
			c.log.Info("consul reachable again", zap.String("consul", c.addr), zap.Int("failures", failures))
			failures = 0
		}
		index = NextIndex(index, meta.LastIndex)
		s := snapshotOf(entries, c.token)
		s.At = time.Now()
		if have && !last.Stale && s.SameMembers(last) && errText(s.Err) == errText(last.Err) {
			continue
		}
		if s.Err != nil {
			c.log.Warn("backend registrations left out", zap.String("consul", c.addr), zap.Int("members", len(s.Members)), zap.Error(s.Err))
		}
		last, have = s, true
		fn(s)
	}
	return nil
}

// snapshotOf reads the members out of passing service entries; with a
// token, only those whose credential it verifies (Verify).
func snapshotOf(entries []*capi.ServiceEntry, token string) Snapshot {
	s := Snapshot{Source: "consul", Members: make([]Member, 0, len(entries))}
	var errs []error
	seen := make(map[string]string, len(entries)) // id → node
	for _, e := range entries {
		if e == nil || e.Service == nil {
			continue
		}
		host := e.Service.Address
		node := ""
		if e.Node != nil {
			node = e.Node.Node
			if host == "" {
				host = e.Node.Address
			}
		}
		addr := net.JoinHostPort(host, strconv.Itoa(e.Service.Port))
		if prev, dup := seen[e.Service.ID]; dup {
			errs = append(errs, fmt.Errorf("%w %q at %s: registered on nodes %q and %q; the one on %q is ignored",
				ErrBadMember, e.Service.ID, addr, prev, node, node))
			continue
		}
		if token != "" && !Verify(token, e.Service.ID, e.Service.Address, e.Service.Port, e.Service.Meta[MetaAuth]) {
			errs = append(errs, fmt.Errorf("%w %q at %s: refused: its registration lacks the backend credential (meta %q: HMAC-SHA256 of its id and address made with the backend token; start the backend with --admin-token or $PICCOLO_BACKEND_TOKEN equal to the gateway's --backend-token)",
				ErrBadMember, e.Service.ID, addr, MetaAuth))
			continue
		}
		m, err := memberFromMeta(e.Service.ID, addr, e.Service.Meta)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		seen[m.ID] = node
		s.Members = append(s.Members, m)
	}
	sortMembers(s.Members)
	s.Err = errors.Join(errs...)
	return s
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Backoff returns the wait after the n-th failure in a row of a Consul query:
// 50 ms doubling, capped at max, jittered uniformly into [d/2, d]. Shared by
// the watchers here and in scheduler/cluster.
func Backoff(n int, max time.Duration) time.Duration {
	d := 50 * time.Millisecond
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d or until ctx ends; it reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// NextIndex is the WaitIndex of the blocking query after one that waited on
// prev and answered last (Consul's blocking-query rules): an index that went
// backwards means the agent's state was reset (start again from 0), and an
// index of 0 must not be waited on (1 instead). Shared by every Consul watch.
func NextIndex(prev, last uint64) uint64 {
	switch {
	case last < prev:
		return 0
	case last == 0:
		return 1
	}
	return last
}
