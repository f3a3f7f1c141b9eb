package dataplane

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"google.golang.org/grpc"
)

// chaosBackend is a sim backend that can be stopped (its connections cut, its
// port closed: what a client sees of a SIGKILL) and started again, fresh (no
// model loaded), on the same port.
type chaosBackend struct {
	addr     string
	profiles []api.Profile
	mu       sync.Mutex
	g        *grpc.Server // nil while stopped
}

func (b *chaosBackend) start(t *testing.T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.g != nil {
		return
	}
	exec, err := sim.New("v100", b.profiles, sim.Options{})
	if err != nil {
		t.Error(err)
		return
	}
	srv, err := backends.NewServer(exec, backends.ServerOptions{})
	if err != nil {
		t.Error(err)
		return
	}
	srv.Serve()
	var lis net.Listener
	for range 50 { // the port was ours a moment ago; a retry covers a slow close
		if lis, err = net.Listen("tcp", b.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Error(err)
		return
	}
	b.g = backends.NewGRPCServer(srv)
	go b.g.Serve(lis)
}

func (b *chaosBackend) stop() {
	b.mu.Lock()
	g := b.g
	b.g = nil
	b.mu.Unlock()
	if g != nil {
		g.Stop()
	}
}

// openFDs counts the process's open file descriptors (Linux).
func openFDs(t *testing.T) int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(es)
}

// Leak tolerances of the chaos test, stated once: a few goroutines and file
// descriptors of the runtime and the test's own HTTP/gRPC plumbing may come
// and go between the two counts.
const (
	goroutineSlack = 10
	fdSlack        = 5
)

// TestChaos kills and restarts the backends of a three-backend static
// gateway at random under open-loop load (150 req/s): every 1–3 s one
// backend, chosen at random, is stopped and started again 0.5–2 s later
// (sometimes two are down at once). Every request must get exactly one
// answer, few may fail, and once everything is closed no goroutine or
// connection may be left over (goroutineSlack, fdSlack). It runs 15 s;
// PICCOLO_CHAOS_SECONDS=60 runs longer.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("a 15 s chaos run")
	}
	secs := 15
	if s := os.Getenv("PICCOLO_CHAOS_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("PICCOLO_CHAOS_SECONDS=%q: want a number of seconds ≥ 1", s)
		}
		secs = n
	}
	runtime.GC()
	g0, fd0 := runtime.NumGoroutine(), openFDs(t)

	base, err := api.LoadBytes(api.NamedDoc{Name: "c.yaml", Data: []byte(faultConfig)})
	if err != nil {
		t.Fatal(err)
	}
	var bs []*chaosBackend
	var bl strings.Builder
	bl.WriteString("backends:\n")
	for i := range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b := &chaosBackend{addr: l.Addr().String(), profiles: base.Profiles}
		l.Close()
		b.start(t)
		bs = append(bs, b)
		fmt.Fprintf(&bl, "  - {id: gpu-%d, address: %q, hardware: v100}\n", i, b.addr)
	}
	sw := newFaultSwitch(t, bl.String(), LiveOptions{ProbeInterval: 200 * time.Millisecond})
	rig := &faultRig{sw: sw}

	rng := rand.New(rand.NewPCG(12, 1))
	var chaos sync.WaitGroup
	kills := 0
	next := time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
	res := rig.openLoop(t, 150, time.Duration(secs)*time.Second, func(el time.Duration) {
		if el < next || el > time.Duration(secs-2)*time.Second {
			return
		}
		next = el + time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		b := bs[rng.IntN(len(bs))]
		down := 500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond)))
		kills++
		b.stop()
		chaos.Add(1)
		time.AfterFunc(down, func() { defer chaos.Done(); b.start(t) })
	})
	chaos.Wait()
	st := sw.Health().Stats()
	n := float64(res.sent.Load())
	t.Logf("%d s, %d kills: %v; within SLO %.2f%%, failed %.2f%%; retries %d, hedges %d, ejections %v",
		secs, kills, res, 100*float64(res.ok.Load())/n, 100*float64(res.failed.Load())/n, st.Retries, st.HedgesWon+st.HedgesLost, sw.Health().Backends())
	if res.dup.Load() != 0 {
		t.Errorf("%d requests answered twice", res.dup.Load())
	}
	if float64(res.failed.Load()) > 0.02*n {
		t.Errorf("%v: want ≤ 2%% failed", res)
	}

	sw.Close()
	for _, b := range bs {
		b.stop()
	}
	var g1, fd1 int
	for range 100 { // let closed connections' goroutines finish
		runtime.GC()
		g1, fd1 = runtime.NumGoroutine(), openFDs(t)
		if g1 <= g0+goroutineSlack && fd1 <= fd0+fdSlack {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("goroutines %d → %d, open fds %d → %d (tolerance +%d, +%d)", g0, g1, fd0, fd1, goroutineSlack, fdSlack)
	if g1 > g0+goroutineSlack || fd1 > fd0+fdSlack {
		buf := make([]byte, 1<<16)
		t.Errorf("leak: goroutines %d → %d, fds %d → %d\n%s", g0, g1, fd0, fd1, buf[:runtime.Stack(buf, true)])
	}
}
