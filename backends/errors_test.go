package backends_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/backends"
)

// TestNotExecuted checks how a caller classifies the Client's errors: a
// refused connection is a transport error that certainly did not run the
// batch; a backend that answers UNAVAILABLE is a transport error that may have;
// an answer about the request is neither.
func TestNotExecuted(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := lis.Addr().String()
	lis.Close() // nothing listens there now: connections are refused
	down, err := backends.NewClient(refused, backends.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	answer := func(code codes.Code) *backends.Client {
		return startFake(t, func(context.Context, *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
			return nil, status.Error(code, "the backend says so")
		})
	}
	for _, tc := range []struct {
		name                  string
		client                *backends.Client
		transport, notRunHere bool
	}{
		{"connection refused", down, true, true},
		{"backend answers UNAVAILABLE", answer(codes.Unavailable), true, false},
		{"backend answers INTERNAL", answer(codes.Internal), false, false},
		{"backend answers INVALID_ARGUMENT", answer(codes.InvalidArgument), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := tc.client.Infer(ctx, "m", [][]api.Tensor{item(1, 1)})
			if err == nil {
				t.Fatal("call succeeded")
			}
			if got := backends.IsTransport(err); got != tc.transport {
				t.Errorf("IsTransport = %v, want %v (%v)", got, tc.transport, err)
			}
			if got := backends.NotExecuted(err); got != tc.notRunHere {
				t.Errorf("NotExecuted = %v, want %v (%v)", got, tc.notRunHere, err)
			}
		})
	}
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := down.Infer(ctx, "m", [][]api.Tensor{item(1, 1)})
		if !errors.Is(err, context.Canceled) || backends.NotExecuted(err) {
			t.Errorf("canceled call: %v; want context.Canceled, not NotExecuted", err)
		}
	})
}
