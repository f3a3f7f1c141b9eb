package deploy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/internal/consultest"
)

// BenchmarkConsulFanOut measures the membership fan-out a cluster pays on
// every backend join or leave: N backends registered with one real Consul agent
// (TCP check each, every second), G watchers (one per gateway, as
// `piccolo gateway --consul` runs) on its health endpoint. Each op deregisters
// one backend, waits until every watcher has the snapshot without it, and
// registers it again. Metrics: leave-p50-ms and leave-max-ms (deregister →
// the last watcher's snapshot), and body-bytes/backend (one backend's share
// of the health response each watcher reads per change).
func BenchmarkConsulFanOut(b *testing.B) {
	for _, size := range []struct{ backends, watchers int }{{50, 5}, {200, 20}, {400, 40}} {
		b.Run(fmt.Sprintf("backends=%d/watchers=%d", size.backends, size.watchers), func(b *testing.B) {
			fanOut(b, size.backends, size.watchers)
		})
	}
}

func fanOut(b *testing.B, n, g int) {
	agent := consultest.Start(b)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer lis.Close()
	go func() { // the backends' port: accept Consul's TCP checks and hang up
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	member := func(i int) membership.Member {
		return membership.Member{ID: fmt.Sprintf("b-%03d", i), Address: lis.Addr().String(), Hardware: "v100", Models: []string{"resnet50", "ssd"}}
	}
	// One client registers them all: membership.Register opens a connection per
	// backend (each talks to its own node's agent in a cluster), and one agent
	// refuses more than 200 connections from one IP.
	client, err := membership.NewClient(agent.Addr(), membership.ConsulAuth{})
	if err != nil {
		b.Fatal(err)
	}
	register := func(i int) {
		m := member(i)
		host, port, _ := net.SplitHostPort(m.Address)
		p, _ := strconv.Atoi(port)
		err := client.Agent().ServiceRegister(&capi.AgentServiceRegistration{
			ID: m.ID, Name: membership.ServiceName, Address: host, Port: p, Tags: []string{m.Hardware}, Meta: m.Meta(),
			Check: &capi.AgentServiceCheck{TCP: m.Address, Interval: membership.CheckInterval.String(), Timeout: membership.CheckTimeout.String(), Status: capi.HealthPassing},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	for i := range n {
		register(i)
	}

	// Every watcher reports its member count; all(k) waits until each has k.
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	counts := make([]int, g)
	for w := range g {
		c, err := membership.NewConsul(agent.Addr(), membership.ConsulOptions{})
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			_ = c.Watch(ctx, func(s membership.Snapshot) {
				mu.Lock()
				counts[w] = len(s.Members)
				mu.Unlock()
				cond.Broadcast()
			})
		}()
	}
	all := func(k int) {
		deadline := time.AfterFunc(30*time.Second, func() { cancel(); cond.Broadcast() })
		defer deadline.Stop()
		mu.Lock()
		defer mu.Unlock()
		for slices.ContainsFunc(counts, func(c int) bool { return c != k }) {
			if ctx.Err() != nil {
				b.Fatalf("watchers did not all see %d members within 30 s: %v", k, counts)
			}
			cond.Wait()
		}
	}
	all(n) // every check passing, every watcher caught up

	resp, err := http.Get("http://" + agent.Addr() + "/v1/health/service/" + membership.ServiceName + "?passing")
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	var leaves []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % n
		start := time.Now()
		if err := client.Agent().ServiceDeregister(member(k).ID); err != nil {
			b.Fatal(err)
		}
		all(n - 1)
		leaves = append(leaves, time.Since(start))
		register(k)
		all(n)
	}
	b.StopTimer()
	slices.Sort(leaves)
	b.ReportMetric(float64(leaves[len(leaves)/2].Microseconds())/1000, "leave-p50-ms")
	b.ReportMetric(float64(leaves[len(leaves)-1].Microseconds())/1000, "leave-max-ms")
	b.ReportMetric(float64(len(body))/float64(n), "body-bytes/backend")
}
