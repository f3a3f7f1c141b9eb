package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/controlplane"
	"github.com/piccolo-serving/piccolo/internal/consultest"
	"github.com/piccolo-serving/piccolo/scheduler/replan"
)

// BenchmarkMembershipChangeToLive measures, over b.N membership changes, the
// time from a backend's deregistration in Consul (the backend the plan runs
// on) to the gateway's new dispatch table being live without it, and the part
// of it after the gateway heard of the change. Reports p50/p99 of both
// (docs/control-plane.md). Run: go test ./cmd/piccolo -run '^$'
// -bench MembershipChangeToLive -benchtime 20x
func BenchmarkMembershipChangeToLive(b *testing.B) {
	agent := consultest.Start(b)
	dir := b.TempDir()
	cfgPath := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, consulTestConfig, 120.0), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var addrs []string
	for range 2 {
		a := make(chan string, 1)
		o := &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath}, executor: "sim",
			logFmt: "json", drain: time.Second, metrics: "off"}
		go func() { _ = runBackend(ctx, o, func(s string) { a <- s }) }()
		select {
		case s := <-a:
			addrs = append(addrs, s)
		case <-time.After(30 * time.Second):
			b.Fatal("backend did not start")
		}
	}
	// Four members on two backend processes (two registrations each).
	dereg := map[string]func(context.Context) error{}
	register := func(id string, addr string) {
		d, err := membership.Register(ctx, agent.Addr(), membership.Member{ID: id, Address: addr, Hardware: "v100", Price: 3}, "")
		if err != nil {
			b.Fatal(err)
		}
		dereg[id] = d
	}
	addrOf := map[string]string{}
	for i := range 4 {
		id := fmt.Sprintf("gpu-%d", i)
		addrOf[id] = addrs[i%2]
		register(id, addrOf[id])
	}
	evs := newPlanEvents()
	url := startConsulGateway(b, ctx, cfgPath, agent.Addr(), replan.Options{}, replan.MonitorOptions{}, evs)
	waitMembers := func(n int) {
		deadline := time.Now().Add(20 * time.Second)
		for len(membersOf(b, url)) != n {
			if time.Now().After(deadline) {
				b.Fatalf("gateway sees %d backends, want %d", len(membersOf(b, url)), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitMembers(4)
	var total, afterReport []time.Duration
	b.ResetTimer()
	for range b.N {
		for len(evs.ch) > 0 {
			<-evs.ch
		}
		used := placedOn(evs.last().Plan)
		victim := used[0]
		start := time.Now()
		if err := dereg[victim](ctx); err != nil {
			b.Fatal(err)
		}
		e := evs.waitPlan(b, 10*time.Second, victim+" out", func(e controlplane.PlanEvent) bool { return !slices.Contains(placedOn(e.Plan), victim) })
		total = append(total, e.Live.Sub(start))
		afterReport = append(afterReport, e.Live.Sub(e.Trigger))
		register(victim, addrOf[victim])
		waitMembers(4)
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(total, 0.5).Microseconds())/1000, "p50-change-to-live-ms")
	b.ReportMetric(float64(percentile(total, 0.99).Microseconds())/1000, "p99-change-to-live-ms")
	b.ReportMetric(float64(percentile(afterReport, 0.5).Microseconds())/1000, "p50-report-to-live-ms")
	b.ReportMetric(float64(percentile(afterReport, 0.99).Microseconds())/1000, "p99-report-to-live-ms")
	b.Logf("%d changes: change → live p50 %v p99 %v; Consul report → live p50 %v p99 %v", len(total),
		percentile(total, 0.5), percentile(total, 0.99), percentile(afterReport, 0.5), percentile(afterReport, 0.99))
}

// percentile is the q-quantile (nearest rank) of ds.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}
