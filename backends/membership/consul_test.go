package membership

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	capi "github.com/hashicorp/consul/api"

	"github.com/piccolo-serving/piccolo/internal/consultest"
)

// fakeBackend is a TCP listener standing in for a backend's gRPC port: Consul's
// TCP check passes while it is open.
type fakeBackend struct {
	lis  net.Listener
	once sync.Once
}

func newFakeBackend(t *testing.T) *fakeBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeBackend{lis: lis}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(f.kill)
	return f
}

func (f *fakeBackend) addr() string { return f.lis.Addr().String() }

// kill closes the listener: the next TCP check is refused, as after SIGKILL.
func (f *fakeBackend) kill() { f.once.Do(func() { f.lis.Close() }) }

// seen is a snapshot and when fn received it.
type seen struct {
	Snapshot
	at time.Time
}

// watch runs a Consul watcher of agent until the test ends; snapshots arrive
// on the returned channel.
func watch(t *testing.T, addr string) <-chan seen {
	t.Helper()
	c, err := NewConsul(addr, ConsulOptions{WaitTime: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan seen, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Watch(ctx, func(s Snapshot) { ch <- seen{s, time.Now()} }); err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ch
}

// waitFor returns the first snapshot from ch that satisfies ok, failing t after
// timeout with what it saw last.
func waitFor(t *testing.T, ch <-chan seen, timeout time.Duration, what string, ok func(Snapshot) bool) seen {
	t.Helper()
	deadline := time.After(timeout)
	var last *seen
	for {
		select {
		case s := <-ch:
			if ok(s.Snapshot) {
				return s
			}
			last = &s
		case <-deadline:
			if last == nil {
				t.Fatalf("no snapshot within %v; waiting for %s", timeout, what)
			}
			t.Fatalf("waiting %v for %s; last snapshot: ids %v stale %v err %v", timeout, what, ids(last.Snapshot), last.Stale, last.Err)
		}
	}
}

func ids(s Snapshot) []string {
	out := make([]string, len(s.Members))
	for i, m := range s.Members {
		out[i] = m.ID
	}
	return out
}

func hasIDs(want ...string) func(Snapshot) bool {
	return func(s Snapshot) bool { return !s.Stale && slices.Equal(ids(s), want) }
}

func register(t *testing.T, addr string, m Member) func(context.Context) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dereg, err := Register(ctx, addr, m, "")
	if err != nil {
		t.Fatalf("Register(%s): %v", m.ID, err)
	}
	t.Cleanup(func() { _ = dereg(context.Background()) })
	return dereg
}

func TestConsulMembership(t *testing.T) {
	agent := consultest.Start(t)
	b0, b1 := newFakeBackend(t), newFakeBackend(t)
	m0 := Member{ID: "gpu-0", Address: b0.addr(), Hardware: "v100", Price: 3.06,
		GPU: "Tesla V100-SXM2-16GB", GPUMemoryBytes: 16 << 30, Models: []string{"ssd", "resnet50"}}
	m1 := Member{ID: "gpu-1", Address: b1.addr(), Hardware: "t4", Price: 0.53}

	ch := watch(t, agent.Addr())
	first := waitFor(t, ch, 5*time.Second, "the first snapshot", func(Snapshot) bool { return true })
	if first.Stale || len(first.Members) != 0 {
		t.Fatalf("first snapshot: ids %v stale %v err %v; want empty and fresh", ids(first.Snapshot), first.Stale, first.Err)
	}

	dereg0 := register(t, agent.Addr(), m0)
	register(t, agent.Addr(), m1)
	both := waitFor(t, ch, 10*time.Second, "gpu-0 and gpu-1", hasIDs("gpu-0", "gpu-1"))
	m0.Models = []string{"resnet50", "ssd"} // read back sorted
	if diff := cmp.Diff([]Member{m0, m1}, both.Members); diff != "" {
		t.Errorf("members with their meta (-want +got):\n%s", diff)
	}
	if both.Err != nil || both.Source != "consul" {
		t.Errorf("Err %v Source %q; want nil, consul", both.Err, both.Source)
	}

	// A backend dies (its port refuses connections): its check goes critical
	// within a check interval and the watcher drops it.
	killed := time.Now()
	b1.kill()
	s := waitFor(t, ch, 15*time.Second, "gpu-1 dropped after its port closed", hasIDs("gpu-0"))
	t.Logf("backend killed → dropped from the snapshot: %v (check interval %v)", s.at.Sub(killed).Round(time.Millisecond), CheckInterval)

	// Graceful shutdown: deregister is seen at once.
	start := time.Now()
	if err := dereg0(context.Background()); err != nil {
		t.Fatalf("deregister: %v", err)
	}
	s = waitFor(t, ch, 5*time.Second, "gpu-0 gone after deregister", hasIDs())
	took := s.at.Sub(start)
	t.Logf("deregister → snapshot: %v", took.Round(time.Microsecond))
	if took > 2*time.Second {
		t.Errorf("deregister took %v to reach the watcher; want well under 2 s (a blocking query returns on change)", took)
	}
	if err := dereg0(context.Background()); err != nil {
		t.Errorf("second deregister: %v; want nil", err)
	}
}

func TestConsulUnreachableThenBack(t *testing.T) {
	agent := consultest.Start(t)
	b0, b1 := newFakeBackend(t), newFakeBackend(t)
	ch := watch(t, agent.Addr())
	register(t, agent.Addr(), Member{ID: "a", Address: b0.addr(), Hardware: "v100"})
	register(t, agent.Addr(), Member{ID: "b", Address: b1.addr(), Hardware: "v100"})
	waitFor(t, ch, 10*time.Second, "a and b", hasIDs("a", "b"))

	agent.Kill()
	s := waitFor(t, ch, 10*time.Second, "a stale snapshot", func(s Snapshot) bool { return s.Stale })
	if got := ids(s.Snapshot); !slices.Equal(got, []string{"a", "b"}) || s.Err == nil {
		t.Fatalf("stale snapshot: ids %v err %v; want the last members a, b and the reason", got, s.Err)
	}
	if !strings.Contains(s.Err.Error(), agent.Addr()) {
		t.Errorf("stale Err %q; want it to name the agent %s", s.Err, agent.Addr())
	}
	select { // one stale snapshot per outage, not one per retry
	case extra := <-ch:
		t.Errorf("another snapshot while Consul is down: ids %v stale %v", ids(extra.Snapshot), extra.Stale)
	case <-time.After(3 * time.Second):
	}

	// A fresh agent (dev mode: empty). The watcher recovers within its
	// backoff cap; the registrations' keepers put a and b back.
	b1.kill() // b's backend died during the outage: it must not come back healthy
	agent.Restart()
	restarted := time.Now()
	s = waitFor(t, ch, 10*time.Second, "a fresh snapshot", func(s Snapshot) bool { return !s.Stale })
	t.Logf("agent restarted → fresh snapshot: %v (ids %v)", s.at.Sub(restarted).Round(time.Millisecond), ids(s.Snapshot))
	for !slices.Equal(ids(s.Snapshot), []string{"a"}) {
		if slices.Contains(ids(s.Snapshot), "b") {
			t.Fatalf("b listed after the restart though its port is closed: ids %v", ids(s.Snapshot))
		}
		s = waitFor(t, ch, 15*time.Second, "a re-registered (b's port is closed)", func(Snapshot) bool { return true })
	}
	t.Logf("agent restarted → a re-registered and seen: %v", s.at.Sub(restarted).Round(time.Millisecond))
	select { // and b stays out
	case s := <-ch:
		t.Errorf("snapshot after a came back: ids %v stale %v; want none (b's port is closed)", ids(s.Snapshot), s.Stale)
	case <-time.After(3 * time.Second):
	}
}

func TestConsulNeverReachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	ch := watch(t, addr)
	s := waitFor(t, ch, 5*time.Second, "a snapshot", func(Snapshot) bool { return true })
	if !s.Stale || s.Err == nil || len(s.Members) != 0 {
		t.Fatalf("snapshot: stale %v err %v ids %v; want stale, an error and no members", s.Stale, s.Err, ids(s.Snapshot))
	}
	if _, err := Register(context.Background(), addr, Member{ID: "x", Address: "127.0.0.1:9", Hardware: "v100"}, ""); err == nil ||
		!strings.Contains(err.Error(), addr) {
		t.Errorf("Register against no agent: %v; want an error naming %s", err, addr)
	}
}

func TestConsulMalformedRegistration(t *testing.T) {
	agent := consultest.Start(t)
	b := newFakeBackend(t)
	ch := watch(t, agent.Addr())
	register(t, agent.Addr(), Member{ID: "good", Address: b.addr(), Hardware: "v100"})
	// Something else registers under our service name without our metadata.
	client, err := capi.NewClient(&capi.Config{Address: agent.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Agent().ServiceRegister(&capi.AgentServiceRegistration{ID: "stray", Name: ServiceName, Address: "127.0.0.1", Port: 9,
		Meta: map[string]string{"price": "x"}}); err != nil {
		t.Fatal(err)
	}
	s := waitFor(t, ch, 10*time.Second, "good listed and stray named", func(s Snapshot) bool {
		return slices.Equal(ids(s), []string{"good"}) && s.Err != nil
	})
	if !strings.Contains(s.Err.Error(), `"stray"`) || !strings.Contains(s.Err.Error(), "hardware") {
		t.Errorf("Err %q; want it to name stray and its missing hardware", s.Err)
	}
}

// TestConsulChangeLatency measures the time from a membership change (a
// deregister or a register returning) to the watcher's snapshot, over 20
// changes, and prints p50/p99 (docs/control-plane.md).
func TestConsulChangeLatency(t *testing.T) {
	agent := consultest.Start(t)
	b := newFakeBackend(t)
	ch := watch(t, agent.Addr())
	waitFor(t, ch, 5*time.Second, "the first snapshot", hasIDs())
	var joins, leaves []time.Duration
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("m-%d", i)
		start := time.Now()
		dereg := register(t, agent.Addr(), Member{ID: id, Address: b.addr(), Hardware: "v100"})
		s := waitFor(t, ch, 5*time.Second, id+" joined", hasIDs(id))
		joins = append(joins, s.at.Sub(start))
		start = time.Now()
		if err := dereg(context.Background()); err != nil {
			t.Fatal(err)
		}
		s = waitFor(t, ch, 5*time.Second, id+" left", hasIDs())
		leaves = append(leaves, s.at.Sub(start))
	}
	all := append(slices.Clone(joins), leaves...)
	p50, p99 := percentile(all, 0.50), percentile(all, 0.99)
	t.Logf("membership change → watcher snapshot over %d changes: p50 %v p99 %v (joins p50 %v, leaves p50 %v)",
		len(all), p50.Round(time.Microsecond), p99.Round(time.Microsecond),
		percentile(joins, 0.5).Round(time.Microsecond), percentile(leaves, 0.5).Round(time.Microsecond))
	if p50 > time.Second {
		t.Errorf("p50 %v; want well under 1 s: a blocking query returns on the change", p50)
	}
}

// BenchmarkConsulChange reports the time from a deregister call to the
// watcher's snapshot without the member (ns/op: register + deregister + both
// snapshots; metrics p50-ms and p99-ms: the deregister alone).
func BenchmarkConsulChange(b *testing.B) {
	agent := consultest.Start(b)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer lis.Close()
	c, err := NewConsul(agent.Addr(), ConsulOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ch := make(chan seen, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Watch(ctx, func(s Snapshot) { ch <- seen{s, time.Now()} }) }()
	next := func(ok func(Snapshot) bool) time.Time {
		for {
			select {
			case s := <-ch:
				if ok(s.Snapshot) {
					return s.at
				}
			case <-time.After(10 * time.Second):
				b.Fatal("no snapshot within 10 s")
			}
		}
	}
	next(func(Snapshot) bool { return true })
	var leaves []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := Member{ID: fmt.Sprintf("m-%d", i), Address: lis.Addr().String(), Hardware: "v100"}
		dereg, err := Register(ctx, agent.Addr(), m, "")
		if err != nil {
			b.Fatal(err)
		}
		next(func(s Snapshot) bool { return len(s.Members) == 1 })
		start := time.Now()
		if err := dereg(ctx); err != nil {
			b.Fatal(err)
		}
		leaves = append(leaves, next(func(s Snapshot) bool { return len(s.Members) == 0 }).Sub(start))
	}
	b.ReportMetric(float64(percentile(leaves, 0.5))/1e6, "p50-ms")
	b.ReportMetric(float64(percentile(leaves, 0.99))/1e6, "p99-ms")
}

// percentile returns the q-quantile of ds (nearest rank).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func TestNextIndex(t *testing.T) {
	for _, tc := range []struct{ prev, last, want uint64 }{
		{0, 7, 7}, // first answer
		{7, 9, 9}, // moved on
		{9, 9, 9}, // timed out unchanged
		{9, 3, 0}, // went backwards: the agent's state was reset
		{0, 0, 1}, // 0 is never waited on
		{5, 0, 0}, // backwards to 0: start again
	} {
		if got := NextIndex(tc.prev, tc.last); got != tc.want {
			t.Errorf("NextIndex(%d, %d) = %d, want %d", tc.prev, tc.last, got, tc.want)
		}
	}
}

// TestConsulRogueRegistrationRefused: with a backend token, a watcher lists
// only registrations that carry their credential (RegisterOptions.BackendToken):
// one registered without it, one that copied a good credential onto another
// address, and one signed with another token are left out and named.
func TestConsulRogueRegistrationRefused(t *testing.T) {
	agent := consultest.Start(t)
	good, rogue, copycat, stranger := newFakeBackend(t), newFakeBackend(t), newFakeBackend(t), newFakeBackend(t)
	c, err := NewConsul(agent.Addr(), ConsulOptions{WaitTime: 10 * time.Second, BackendToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan seen, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Watch(ctx, func(s Snapshot) { ch <- seen{s, time.Now()} }) }()
	t.Cleanup(func() { cancel(); <-done })

	reg := func(m Member, token string) {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dereg, err := RegisterWith(rctx, agent.Addr(), m, RegisterOptions{BackendToken: token})
		if err != nil {
			t.Fatalf("RegisterWith(%s): %v", m.ID, err)
		}
		t.Cleanup(func() { _ = dereg(context.Background()) })
	}
	reg(Member{ID: "good", Address: good.addr(), Hardware: "v100"}, "tok")
	reg(Member{ID: "rogue", Address: rogue.addr(), Hardware: "v100"}, "")
	reg(Member{ID: "stranger", Address: stranger.addr(), Hardware: "v100"}, "other")
	// The copycat registers as "good" would, with good's credential, at its own address.
	client, err := NewClient(agent.Addr(), ConsulAuth{})
	if err != nil {
		t.Fatal(err)
	}
	host, port := splitAddr(t, good.addr())
	_, cport := splitAddr(t, copycat.addr())
	if err := client.Agent().ServiceRegister(&capi.AgentServiceRegistration{ID: "copycat", Name: ServiceName, Address: host, Port: cport,
		Meta: map[string]string{MetaHardware: "v100", MetaAuth: Credential("tok", "good", host, port)}}); err != nil {
		t.Fatal(err)
	}
	s := waitFor(t, ch, 15*time.Second, "good alone listed, the three others named", func(s Snapshot) bool {
		return slices.Equal(ids(s), []string{"good"}) && s.Err != nil && strings.Count(s.Err.Error(), "lacks the backend credential") == 3
	})
	for _, id := range []string{`"rogue"`, `"copycat"`, `"stranger"`} {
		if !strings.Contains(s.Err.Error(), id) {
			t.Errorf("Err %q does not name %s", s.Err, id)
		}
	}
	// Without a token the watcher asks nothing: all four are members.
	waitFor(t, watch(t, agent.Addr()), 15*time.Second, "all four without a token", hasIDs("copycat", "good", "rogue", "stranger"))
}

func splitAddr(t *testing.T, addr string) (string, int) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return host, port
}

// TestNewClientAuth: the ACL token comes from the flag, else from
// CONSUL_HTTP_TOKEN as for the consul CLI (seen by an HTTP server standing
// in for the agent); a certificate without its key, or a CA file that does
// not exist, is refused naming it.
func TestNewClientAuth(t *testing.T) {
	tokens := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokens <- r.Header.Get("X-Consul-Token")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`"127.0.0.1:8300"`))
	}))
	defer srv.Close()
	t.Setenv("CONSUL_HTTP_TOKEN", "from-env")
	for _, c := range []struct {
		name string
		auth ConsulAuth
		want string
	}{{"environment", ConsulAuth{}, "from-env"}, {"flag over environment", ConsulAuth{Token: "from-flag"}, "from-flag"}} {
		client, err := NewClient(srv.Listener.Addr().String(), c.auth)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Status().Leader(); err != nil {
			t.Fatal(err)
		}
		if got := <-tokens; got != c.want {
			t.Errorf("%s: token %q, want %q", c.name, got, c.want)
		}
	}
	if _, err := NewClient("127.0.0.1:8500", ConsulAuth{CertFile: "c.pem"}); err == nil || !strings.Contains(err.Error(), "--consul-client-key") {
		t.Errorf("a certificate without its key: %v", err)
	}
	if _, err := NewClient("127.0.0.1:8500", ConsulAuth{CAFile: "/nonexistent/ca.pem"}); err == nil || !strings.Contains(err.Error(), "ca.pem") {
		t.Errorf("a CA file that does not exist: %v", err)
	}
}
