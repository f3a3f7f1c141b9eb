// Package kservetest serves a kserve.Server on loopback for tests, as
// net/http/httptest does for handlers: free ports, stopped in t.Cleanup.
// kserve's own tests do not use it (they are inside the package).
package kservetest

import (
	"net"
	"testing"

	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/kserve"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ServeHTTP serves srv's HTTP routes on a free loopback port until the test
// ends and returns the base URL, http://127.0.0.1:<port>.
func ServeHTTP(t testing.TB, srv *kserve.Server) string {
	t.Helper()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.NewHTTPServer()
	go hs.Serve(srv.WatchHangups(hl))
	t.Cleanup(func() { hs.Shutdown() })
	return "http://" + hl.Addr().String()
}

// ServeGRPC serves srv's gRPC service on a free loopback port until the test
// ends and returns a client connected to it.
func ServeGRPC(t testing.TB, srv *kserve.Server) inference.GRPCInferenceServiceClient {
	t.Helper()
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := srv.NewGRPCServer()
	go gs.Serve(gl)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return inference.NewGRPCInferenceServiceClient(conn)
}
