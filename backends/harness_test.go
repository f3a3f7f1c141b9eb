package backends_test

import (
	"context"
	"encoding/binary"
	"math"
	"net"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/backends/sim"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// testProfiles is the config text the sim backends of these tests run.
const testProfiles = `
profiles:
  - model: m
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 2ms}
      - {batch: 4, concurrency: 1, duration: 3ms}
      - {batch: 8, concurrency: 1, duration: 4ms}
      - {batch: 8, concurrency: 2, duration: 6ms}
  - model: steps
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 20ms}
      - {batch: 4, concurrency: 1, duration: 250ms}
      - {batch: 8, concurrency: 1, duration: 500ms}
  - model: lanes
    hardware: v100
    entries:
      - {batch: 8, concurrency: 2, duration: 300ms}
  - model: other-hw
    hardware: t4
    entries:
      - {batch: 1, concurrency: 1, duration: 1ms}
`

// simBackend is a sim backend served over loopback gRPC for one test.
type simBackend struct {
	addr   string
	server *backends.Server
	client *backends.Client
	raw    inference.GRPCInferenceServiceClient // for requests the Client would refuse to build
}

func startSim(t testing.TB, opts sim.Options) *simBackend {
	t.Helper()
	return startSimConfig(t, testProfiles, "v100", opts)
}

// startSimProfile serves a sim of the first hardware type in profiles.
func startSimProfile(t testing.TB, profiles string) *simBackend {
	t.Helper()
	var cfg api.Config
	if err := yaml.Unmarshal([]byte(profiles), &cfg); err != nil {
		t.Fatal(err)
	}
	return startSimConfig(t, profiles, cfg.Profiles[0].Hardware, sim.Options{})
}

func startSimConfig(t testing.TB, profiles, hardware string, opts sim.Options) *simBackend {
	t.Helper()
	var cfg api.Config
	if err := yaml.Unmarshal([]byte(profiles), &cfg); err != nil {
		t.Fatal(err)
	}
	exec, err := sim.New(hardware, cfg.Profiles, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := backends.NewServer(exec, backends.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, srv)
}

// serve runs srv on 127.0.0.1:0 until the test ends.
func serve(t testing.TB, srv *backends.Server) *simBackend {
	t.Helper()
	g := backends.NewGRPCServer(srv)
	return serveGRPC(t, g, srv)
}

func serveGRPC(t testing.TB, g *grpc.Server, srv *backends.Server) *simBackend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	addr := lis.Addr().String()
	c, err := backends.NewClient(addr, backends.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &simBackend{addr: addr, server: srv, client: c, raw: inference.NewGRPCInferenceServiceClient(conn)}
}

// fp32 encodes xs as little-endian FP32 bytes.
func fp32(xs ...float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// decodeFP32 decodes little-endian FP32 bytes.
func decodeFP32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// item returns one item of rows rows of input0 FP32 [rows, 4], every value
// derived from seed so that no two items are alike.
func item(seed, rows int) []api.Tensor {
	xs := make([]float32, 4*rows)
	for i := range xs {
		xs[i] = float32(seed*1000 + i)
	}
	return []api.Tensor{{Name: "input0", Datatype: "FP32", Shape: []int64{int64(rows), 4}, Data: fp32(xs...)}}
}

func load(t testing.TB, b *simBackend, model string, batch, concurrency int) {
	t.Helper()
	if err := b.client.Load(context.Background(), model, batch, concurrency); err != nil {
		t.Fatalf("load %s: %v", model, err)
	}
}
