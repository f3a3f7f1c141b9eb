package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	capi "github.com/hashicorp/consul/api"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/backends/membership"
)

// SchedulerService is the Consul service every re-planner candidate registers
// as; its TTL check is what ties the candidate's lock session to its liveness.
const SchedulerService = "piccolo-scheduler"

// ErrNotLeader is returned by Leadership.Publish when the lock is no longer
// this candidate's: a successor may already be publishing.
var ErrNotLeader = errors.New("not the cluster's scheduler any more")

// DefaultTTL is how long a candidate may miss its heartbeat before Consul
// declares it dead and releases its lock (Options of Campaign).
const DefaultTTL = 2 * time.Second

// Leadership is held by the elected candidate while its lead function runs.
type Leadership struct {
	c       *Client
	id      string
	session string
}

// ID is the leader's candidate id.
func (l *Leadership) ID() string { return l.id }

// Publish stores r as the cluster's plan in one transaction that first checks
// the lock is still held by this leadership's session (fencing: a leader that
// lost the lock without noticing yet cannot overwrite its successor's plan).
// Errors: ErrNotLeader when the check fails; Consul errors as they come.
func (l *Leadership) Publish(ctx context.Context, r *Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	ops := capi.KVTxnOps{
		{Verb: capi.KVCheckSession, Key: l.c.LockKey(), Session: l.session},
		{Verb: capi.KVSet, Key: l.c.PlanKey(), Value: b},
	}
	ok, resp, _, err := l.c.c.KV().Txn(ops, (&capi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("consul %s: publish the plan: %w", l.c.addr, err)
	}
	if !ok {
		why := "the lock check failed"
		if resp != nil && len(resp.Errors) > 0 {
			why = resp.Errors[0].What
		}
		return fmt.Errorf("%w: %s", ErrNotLeader, why)
	}
	return nil
}

// Campaign runs for the cluster's re-planner lock until ctx ends, as candidate
// id (unique per process; DefaultID gives host-pid). It registers service
// SchedulerService with a TTL check of ttl (0: DefaultTTL) that it passes every
// ttl/4, creates a lock session tied to that check, and blocks on the lock.
// While it holds the lock it runs lead with a context that ends when the lock
// is lost (session invalidated, Consul unreachable) or ctx ends; when lead
// returns it releases the lock, and campaigns again unless ctx ended. lead
// should return soon after its context ends. Errors from Consul are logged and
// retried with backoff; Campaign returns nil when ctx ends, after releasing
// the lock and deregistering (a standby takes over at once).
func (c *Client) Campaign(ctx context.Context, id string, ttl time.Duration, lead func(context.Context, *Leadership)) error {
	if id == "" {
		return errors.New("cluster: a candidate needs an id")
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if ttl < time.Second {
		return fmt.Errorf("cluster: candidate TTL %v: must be at least 1s (Consul's TTL check resolution)", ttl)
	}
	checkID := SchedulerService + ":" + id
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = c.c.Agent().ServiceDeregisterOpts(id, (&capi.QueryOptions{}).WithContext(dctx))
	}()
	failures := 0
	for ctx.Err() == nil {
		err := c.campaignOnce(ctx, id, checkID, ttl, lead)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			failures++
			if failures == 1 {
				c.log.Warn("scheduler candidate: cannot campaign; retrying", zap.String("candidate", id), zap.Error(err))
			}
		} else {
			failures = 1
		}
		if !membership.Sleep(ctx, membership.Backoff(failures, maxBackoff)) {
			break
		}
	}
	return nil
}

// campaignOnce registers, waits for the lock, leads, and releases.
func (c *Client) campaignOnce(ctx context.Context, id, checkID string, ttl time.Duration, lead func(context.Context, *Leadership)) error {
	agent := c.c.Agent()
	reg := &capi.AgentServiceRegistration{
		ID: id, Name: SchedulerService,
		Meta: map[string]string{"cluster": c.prefix},
		Check: &capi.AgentServiceCheck{
			CheckID: checkID, TTL: ttl.String(), Status: capi.HealthPassing,
			DeregisterCriticalServiceAfter: "1m",
		},
	}
	if err := agent.ServiceRegisterOpts(reg, capi.ServiceRegisterOpts{}.WithContext(ctx)); err != nil {
		return fmt.Errorf("consul %s: register %s: %w", c.addr, SchedulerService, err)
	}
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	go c.heartbeat(hbCtx, checkID, ttl/4)

	sid, _, err := c.c.Session().Create(&capi.SessionEntry{
		Name:          SchedulerService + " " + id,
		Behavior:      capi.SessionBehaviorRelease,
		LockDelay:     time.Millisecond,
		NodeChecks:    []string{"serfHealth"},
		ServiceChecks: []capi.ServiceCheck{{ID: checkID}},
	}, (&capi.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("consul %s: create the lock session: %w", c.addr, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = c.c.Session().Destroy(sid, (&capi.WriteOptions{}).WithContext(dctx))
	}()
	// LockWaitTime bounds each blocking query of a waiting candidate: api.Lock
	// looks at its stop channel only between queries, so a standby whose ctx
	// ends leaves within a second (one cheap query a second while waiting).
	value, _ := json.Marshal(map[string]string{"leader": id})
	lock, err := c.c.LockOpts(&capi.LockOptions{
		Key: c.LockKey(), Value: value, Session: sid,
		LockWaitTime: time.Second, MonitorRetries: 3, MonitorRetryTime: 250 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	lost, err := lock.Lock(ctx.Done())
	if err != nil {
		return fmt.Errorf("consul %s: wait for the lock %s: %w", c.addr, c.LockKey(), err)
	}
	if lost == nil { // ctx ended while waiting
		return nil
	}
	c.log.Info("elected the cluster's scheduler", zap.String("candidate", id), zap.String("lock", c.LockKey()))
	lctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-lost:
			c.log.Warn("lost the scheduler lock: stepping down", zap.String("candidate", id))
		case <-lctx.Done():
		}
		cancel()
	}()
	lead(lctx, &Leadership{c: c, id: id, session: sid})
	cancel()
	if err := lock.Unlock(); err != nil && !errors.Is(err, capi.ErrLockNotHeld) {
		c.log.Debug("release the scheduler lock", zap.Error(err))
	}
	return nil
}

// heartbeat passes the candidate's TTL check every period until ctx ends.
func (c *Client) heartbeat(ctx context.Context, checkID string, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := c.c.Agent().UpdateTTLOpts(checkID, "", capi.HealthPassing, (&capi.QueryOptions{}).WithContext(ctx))
		if err != nil && !failing && ctx.Err() == nil {
			c.log.Warn("scheduler candidate: heartbeat failed", zap.String("check", checkID), zap.Error(err))
		}
		failing = err != nil
	}
}

// DefaultID is a candidate id unique on this host: "<host>-<pid>".
func DefaultID() string { return fmt.Sprintf("%s-%d", Hostname(), os.Getpid()) }

// Hostname is the host's name for ids, "host" when the system has none.
func Hostname() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "host"
}
