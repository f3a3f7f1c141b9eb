package membership

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	capi "github.com/hashicorp/consul/api"
	"go.uber.org/zap"
)

// Health check of a registration. Consul runs a TCP check against the
// backend's gRPC address every CheckInterval (Consul's minimum interval is 1 s);
// one failed connect marks the instance critical, and watchers, which list
// passing instances only, drop it at once. An instance critical for
// DeregisterCriticalAfter is deregistered by the agent: 1 minute is Consul's
// minimum (check_deregister_interval_min; shorter values are raised to it) and
// the agent reaps every 30 s, so a dead backend's registration is gone 1–1.5
// minutes after it died. That is cleanup only: it left every watcher's view
// within about a second of dying.
const (
	CheckInterval           = time.Second
	CheckTimeout            = time.Second
	DeregisterCriticalAfter = time.Minute
)

// RegisterOptions tune RegisterWith. The zero value is the default.
type RegisterOptions struct {
	// HealthAddr is the host:port Consul's TCP check connects to (default: the
	// member's Address; an empty or unspecified host, such as ":9101" or
	// "0.0.0.0:9101", is checked at 127.0.0.1, as the agent runs on the
	// backend's host).
	HealthAddr string
	// Refresh is how often the registration is checked and re-made if the
	// agent lost it, e.g. after an agent restart (default 2 s).
	Refresh time.Duration
	// Logger says when the registration was lost and re-made, or cannot be.
	// Default: no logs.
	Logger *zap.Logger
	// Auth is the ACL token and TLS of the Consul client (NewClient).
	Auth ConsulAuth
	// BackendToken, when set, signs the registration: meta MetaAuth is its
	// Credential, which gateways started with the same --backend-token ask
	// of every backend (ConsulOptions.BackendToken).
	BackendToken string
}

// Register registers m with the Consul agent at consulAddr as service
// ServiceName (ID m.ID, address and port from m.Address, Meta from m.Meta(),
// tag m.Hardware) with a TCP health check on healthAddr ("" for m.Address)
// every CheckInterval. It is RegisterWith with default options; see there.
func Register(ctx context.Context, consulAddr string, m Member, healthAddr string) (deregister func(context.Context) error, err error) {
	return RegisterWith(ctx, consulAddr, m, RegisterOptions{HealthAddr: healthAddr})
}

// RegisterWith registers m as Register does. ctx bounds the first
// registration only. Until deregister is called, a goroutine checks every
// o.Refresh that the agent still holds the registration and re-makes it when
// the agent lost it (an agent restarted in dev mode keeps nothing).
//
// deregister stops that goroutine and removes the registration, so watchers
// drop m at once; call it on graceful shutdown. Later calls return nil.
//
// Errors: ErrBadMember (wrapped, naming each bad field) when m cannot be
// registered; the agent's error when it refuses or cannot be reached.
func RegisterWith(ctx context.Context, consulAddr string, m Member, o RegisterOptions) (deregister func(context.Context) error, err error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	host, portText, _ := net.SplitHostPort(m.Address) // validated
	port, _ := strconv.Atoi(portText)
	if unspecified(host) {
		host = "" // Consul then gives the node's address
	}
	check := o.HealthAddr
	if check == "" {
		check = m.Address
	}
	chost, cport, err := net.SplitHostPort(check)
	if err != nil {
		return nil, fmt.Errorf("%w %q: health address %q: want host:port: %v", ErrBadMember, m.ID, check, err)
	}
	if unspecified(chost) {
		check = net.JoinHostPort("127.0.0.1", cport)
	}
	if o.Refresh <= 0 {
		o.Refresh = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	client, err := NewClient(consulAddr, o.Auth)
	if err != nil {
		return nil, err
	}
	meta := m.Meta()
	if o.BackendToken != "" {
		meta[MetaAuth] = Credential(o.BackendToken, m.ID, host, port)
	}
	reg := &capi.AgentServiceRegistration{
		ID:      m.ID,
		Name:    ServiceName,
		Address: host,
		Port:    port,
		Tags:    []string{m.Hardware},
		Meta:    meta,
		Check: &capi.AgentServiceCheck{
			Name:                           "gRPC port accepts connections",
			TCP:                            check,
			Interval:                       CheckInterval.String(),
			Timeout:                        CheckTimeout.String(),
			DeregisterCriticalServiceAfter: DeregisterCriticalAfter.String(),
			// Register is called once the backend serves: visible at once
			// rather than after the first check.
			Status: capi.HealthPassing,
		},
	}
	agent := client.Agent()
	opts := capi.ServiceRegisterOpts{ReplaceExistingChecks: true}
	if err := agent.ServiceRegisterOpts(reg, opts.WithContext(ctx)); err != nil {
		return nil, fmt.Errorf("registering backend %q with consul %s: %w", m.ID, consulAddr, err)
	}

	// A re-registration starts critical: the backend shows again only once
	// its check passes, so a keeper outliving its gRPC server lists nothing.
	again := *reg
	againCheck := *reg.Check
	againCheck.Status = capi.HealthCritical
	again.Check = &againCheck
	keepCtx, stop := context.WithCancel(context.Background())
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		keep(keepCtx, agent, &again, o)
	}()
	var once sync.Once
	deregister = func(ctx context.Context) error {
		var err error
		once.Do(func() {
			stop()
			<-kept
			err = agent.ServiceDeregisterOpts(m.ID, (&capi.QueryOptions{}).WithContext(ctx))
			if err != nil {
				err = fmt.Errorf("deregistering backend %q from consul %s: %w", m.ID, consulAddr, err)
			}
		})
		return err
	}
	return deregister, nil
}

// keep re-registers reg whenever the agent no longer holds it, until ctx ends.
func keep(ctx context.Context, agent *capi.Agent, reg *capi.AgentServiceRegistration, o RegisterOptions) {
	lost := false // logged once per loss
	for Sleep(ctx, o.Refresh) {
		qctx, cancel := context.WithTimeout(ctx, o.Refresh+5*time.Second)
		_, _, err := agent.Service(reg.ID, (&capi.QueryOptions{}).WithContext(qctx))
		if err == nil {
			cancel()
			continue
		}
		var se capi.StatusError
		if !errors.As(err, &se) || se.Code != 404 {
			cancel() // agent unreachable: nothing to do until it is back
			if !lost {
				o.Logger.Warn("consul agent unreachable; will re-register when it is back", zap.String("id", reg.ID), zap.Error(err))
				lost = true
			}
			continue
		}
		err = agent.ServiceRegisterOpts(reg, capi.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(qctx))
		cancel()
		if err != nil {
			o.Logger.Warn("re-registering with consul failed; retrying", zap.String("id", reg.ID), zap.Error(err))
			lost = true
			continue
		}
		o.Logger.Info("consul had lost the registration; re-registered", zap.String("id", reg.ID))
		lost = false
	}
}

func unspecified(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}
