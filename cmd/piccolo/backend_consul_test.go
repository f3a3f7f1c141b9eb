package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/piccolo-serving/piccolo/backends/membership"
	"github.com/piccolo-serving/piccolo/internal/consultest"
)

// TestBackendRegistersWithConsul runs `piccolo backend --consul` against a real
// agent: a watcher sees it join with its metadata and leave at shutdown.
func TestBackendRegistersWithConsul(t *testing.T) {
	agent := consultest.Start(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "profiles.yaml")
	if err := os.WriteFile(cfgPath, []byte(`
hardware: [{name: v100, price: 3.06}]
profiles:
  - {model: resnet50, hardware: v100, entries: [{batch: 4, concurrency: 1, duration: 5ms}]}
  - {model: ssd, hardware: v100, entries: [{batch: 2, concurrency: 1, duration: 5ms}]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	waitSnap := watchMembers(t, agent.Addr(), 15*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath}, executor: "sim",
		logFmt: "json", drain: 5 * time.Second, metrics: "off", consul: agent.Addr(), id: "gpu-7"}
	addr, done := startBackend(t, ctx, o)
	s := waitSnap("gpu-7", func(s membership.Snapshot) bool { return len(s.Members) == 1 })
	want := membership.Member{ID: "gpu-7", Address: addr, Hardware: "v100", Price: 3.06, Models: []string{"resnet50", "ssd"}}
	if diff := cmp.Diff(want, s.Members[0]); diff != "" {
		t.Errorf("registered member (-want +got):\n%s", diff)
	}

	stopped := time.Now()
	cancel()
	waitSnap("gpu-7 gone", func(s membership.Snapshot) bool { return !s.Stale && len(s.Members) == 0 })
	if took := time.Since(stopped); took > 5*time.Second {
		t.Errorf("deregistration seen after %v; want it before the drain ends", took)
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func TestBackendConsulFlagErrors(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(cfgPath, []byte("hardware: [{name: t4, price: 1}]\nprofiles: [{model: m, hardware: t4, entries: [{batch: 1, concurrency: 1, duration: 1ms}]}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := backendOptions{hardware: "t4", files: []string{cfgPath}, executor: "sim", logFmt: "json", listen: "127.0.0.1:0", metrics: "off"}
	for _, tc := range []struct {
		name string
		edit func(*backendOptions)
		says []string
	}{
		{"id without consul", func(o *backendOptions) { o.id = "x" }, []string{"--id is only used with --consul"}},
		{"no agent", func(o *backendOptions) { o.consul = "127.0.0.1:1" }, []string{"--consul 127.0.0.1:1", "registering backend"}},
		{"bad id", func(o *backendOptions) { o.consul = "127.0.0.1:1"; o.id = "a/b" }, []string{`id "a/b"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.edit(&o)
			err := runBackend(context.Background(), &o, nil)
			if err == nil || !slices.ContainsFunc(tc.says, func(s string) bool { return strings.Contains(err.Error(), s) }) {
				t.Fatalf("got %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

// watchMembers watches the backends registered with the Consul agent at addr
// until the test ends, and returns a wait that returns the first snapshot for
// which ok holds, or fails t after limit naming what it waited for.
func watchMembers(t *testing.T, addr string, limit time.Duration) func(what string, ok func(membership.Snapshot) bool) membership.Snapshot {
	t.Helper()
	w, err := membership.NewConsul(addr, membership.ConsulOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snaps := make(chan membership.Snapshot, 100)
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { defer close(wdone); _ = w.Watch(wctx, func(s membership.Snapshot) { snaps <- s }) }()
	t.Cleanup(func() { wcancel(); <-wdone })
	return func(what string, ok func(membership.Snapshot) bool) membership.Snapshot {
		t.Helper()
		deadline := time.After(limit)
		for {
			select {
			case s := <-snaps:
				if ok(s) {
					return s
				}
			case <-deadline:
				t.Fatalf("no membership snapshot with %s within %v", what, limit)
			}
		}
	}
}
