// Package consultest starts real Consul agents for tests: `consul agent -dev`
// bound to 127.0.0.1 on free ports, in-memory, one process per Agent, stopped in
// the test's Cleanup.
//
// The binary comes from scripts/consul.sh (a cached Consul v1.22.6, built once
// into $PICCOLO_CACHE/bin when missing, about 6 minutes on 2 cores). When it
// cannot be had, Start skips the test with a message saying how to get it,
// unless the environment sets PICCOLO_REQUIRE_CONSUL (as `make test` does after
// `make consul`): then it fails the test.
//
// An Agent's methods are called from the test's goroutine. Stop, Kill and
// Restart change the agent while watchers elsewhere keep running; Restart brings
// up a fresh agent (empty state: dev mode keeps nothing) on the same ports, so
// clients that know Addr() reach it again.
package consultest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvRequire is the environment variable that turns a missing Consul from a
// skip into a failure.
const EnvRequire = "PICCOLO_REQUIRE_CONSUL"

// EnvBinary names a Consul binary to use instead of running scripts/consul.sh.
const EnvBinary = "PICCOLO_CONSUL"

// StartTimeout bounds how long Start and Restart wait for the agent to elect
// itself leader and list its node (well under a second when the machine is idle).
const StartTimeout = 30 * time.Second

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary returns the path of the Consul binary: $PICCOLO_CONSUL, else what
// scripts/consul.sh prints (found by walking up from the working directory to
// the repository root). It skips tb, or fails it when PICCOLO_REQUIRE_CONSUL is
// set, when there is none.
func Binary(tb testing.TB) string {
	tb.Helper()
	binOnce.Do(func() { binPath, binErr = findBinary() })
	if binErr != nil {
		if os.Getenv(EnvRequire) != "" {
			tb.Fatalf("%s is set but Consul is not available: %v (run `make consul` or scripts/consul.sh)", EnvRequire, binErr)
		}
		tb.Skipf("skipped: Consul is not available: %v; run `make consul` (scripts/consul.sh builds it once) or set %s (set %s=1 to fail instead)",
			binErr, EnvBinary, EnvRequire)
	}
	return binPath
}

func findBinary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvBinary, p, err)
		}
		return p, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, "scripts", "consul.sh")
	var stderr bytes.Buffer
	cmd := exec.Command(script)
	cmd.Dir = root
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s", script, err, lastLines(stderr.String(), 10))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	p := strings.TrimSpace(lines[len(lines)-1])
	if p == "" {
		return "", fmt.Errorf("%s printed no path", script)
	}
	return p, nil
}

// repoRoot walks up from the working directory (a test runs in its package's
// directory) to the directory whose go.mod declares the piccolo module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/piccolo-serving/piccolo\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no piccolo go.mod above %s: cannot find scripts/consul.sh", dir)
		}
	}
}

// Agent is one Consul dev agent process on loopback.
type Agent struct {
	tb    testing.TB
	bin   string
	ports ports
	node  string
	// token is the ACL management token of an agent started by StartACL
	// ("": ACLs off).
	token string

	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  *syncBuffer
}

type ports struct{ http, serfLAN, serfWAN, server int }

// Start starts a dev agent on free loopback ports and waits until it is leader
// and lists its own node, so registrations and queries work at once. The agent
// is killed in tb's Cleanup; when tb failed, the agent's log tail is printed.
func Start(tb testing.TB) *Agent {
	tb.Helper()
	return start(tb, "")
}

// StartACL is Start with ACLs on, denying by default: every call needs a
// token, managementToken allowing everything (Consul's initial management
// token), others what their policies grant.
func StartACL(tb testing.TB, managementToken string) *Agent {
	tb.Helper()
	return start(tb, managementToken)
}

func start(tb testing.TB, token string) *Agent {
	tb.Helper()
	a := &Agent{tb: tb, bin: Binary(tb), token: token}
	tb.Cleanup(func() {
		a.Kill()
		if tb.Failed() && a.log != nil {
			tb.Logf("consul agent %s log (tail):\n%s", a.Addr(), lastLines(a.log.String(), 40))
		}
	})
	// The ports were free when picked; another process can take one before
	// the agent binds it (now and then, on a busy machine). Such a start is
	// tried again on fresh ports.
	for try := 1; ; try++ {
		p, err := freePorts(4)
		if err != nil {
			tb.Fatalf("consultest: choosing ports: %v", err)
		}
		a.ports = ports{http: p[0], serfLAN: p[1], serfWAN: p[2], server: p[3]}
		a.node = fmt.Sprintf("piccolo-test-%d", a.ports.http)
		err = a.start()
		if err == nil {
			return a
		}
		if try == 3 || !strings.Contains(a.log.String(), "address already in use") {
			tb.Fatalf("consultest: %v", err)
		}
	}
}

// Addr returns the agent's HTTP API address, host:port (what consul/api's
// Config.Address takes).
func (a *Agent) Addr() string { return "127.0.0.1:" + strconv.Itoa(a.ports.http) }

// Running reports whether the agent process is up.
func (a *Agent) Running() bool {
	if a.cmd == nil {
		return false
	}
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}

// Stop stops the agent gracefully (SIGINT: it leaves the cluster) and waits
// for it to exit (SIGKILL after 10 s).
func (a *Agent) Stop() { a.signal(syscall.SIGINT, 10*time.Second) }

// Kill kills the agent (SIGKILL) and waits for it to exit.
func (a *Agent) Kill() { a.signal(syscall.SIGKILL, 10*time.Second) }

// Restart stops the agent if it runs and starts a fresh one on the same ports.
// Dev mode keeps no state: every registration is gone.
func (a *Agent) Restart() {
	a.tb.Helper()
	a.Stop()
	var err error
	for i := 0; i < 20; i++ { // the ports may linger for a moment after exit
		if err = a.start(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	a.tb.Fatalf("consultest: restart: %v", err)
}

func (a *Agent) signal(sig os.Signal, wait time.Duration) {
	if !a.Running() {
		return
	}
	_ = a.cmd.Process.Signal(sig)
	select {
	case <-a.done:
	case <-time.After(wait):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

func (a *Agent) start() error {
	a.log = &syncBuffer{}
	args := []string{"agent", "-dev",
		"-bind=127.0.0.1", "-client=127.0.0.1", "-node=" + a.node,
		"-http-port=" + strconv.Itoa(a.ports.http), "-https-port=-1",
		"-dns-port=-1", "-grpc-port=-1", "-grpc-tls-port=-1",
		"-serf-lan-port=" + strconv.Itoa(a.ports.serfLAN),
		"-serf-wan-port=" + strconv.Itoa(a.ports.serfWAN),
		"-server-port=" + strconv.Itoa(a.ports.server),
		"-log-level=info"}
	if a.token != "" {
		// The agent's own token is the management one: it registers its
		// node and syncs services without a token of its own.
		args = append(args, "-hcl", fmt.Sprintf(`acl { enabled = true, default_policy = "deny", tokens { initial_management = %q, agent = %q } }`, a.token, a.token))
	}
	cmd := exec.Command(a.bin, args...)
	cmd.Stdout = a.log
	cmd.Stderr = a.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", a.bin, err)
	}
	a.cmd = cmd
	a.done = make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(a.done)

	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	err := a.waitReady(ctx)
	if err != nil {
		a.Kill()
		return fmt.Errorf("consul agent on %s: %w; log:\n%s", a.Addr(), err, lastLines(a.log.String(), 20))
	}
	return nil
}

// waitReady polls until the agent has a leader and its node is in the catalog.
func (a *Agent) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second}
	get := func(path string) (string, error) {
		req, err := http.NewRequest("GET", "http://"+a.Addr()+path, nil)
		if err != nil {
			return "", err
		}
		if a.token != "" {
			req.Header.Set("X-Consul-Token", a.token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return string(b), err
	}
	for {
		select {
		case <-a.done:
			return errors.New("agent exited during start")
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v", StartTimeout)
		case <-time.After(50 * time.Millisecond):
		}
		leader, err := get("/v1/status/leader")
		if err != nil || strings.Trim(strings.TrimSpace(leader), `"`) == "" {
			continue
		}
		nodes, err := get("/v1/catalog/nodes")
		if err == nil && strings.Contains(nodes, `"`+a.node+`"`) {
			return nil
		}
	}
}

// freePorts returns n distinct TCP ports that were free on 127.0.0.1 a moment
// ago (and whose UDP twin was too: Serf uses both).
func freePorts(n int) ([]int, error) {
	var out []int
	var hold []io.Closer
	defer func() {
		for _, c := range hold {
			c.Close()
		}
	}()
	for tries := 0; len(out) < n && tries < 100; tries++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		hold = append(hold, l)
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		hold = append(hold, u)
		out = append(out, port)
	}
	if len(out) < n {
		return nil, fmt.Errorf("found %d of %d free ports", len(out), n)
	}
	return out, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// syncBuffer is a bytes.Buffer safe for the process's writers and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
