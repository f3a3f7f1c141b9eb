package backends_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
)

// gated is an Executor of one model, "chain", whose batches wait at a gate
// until the test opens it and then, like a fused chain reaching its next
// step, fail if their model was closed meanwhile (what ONNX Runtime lanes do:
// onnx.ErrClosed).
type gated struct {
	started chan struct{} // one send per batch that reached Run
	gate    chan struct{} // closed by the test: batches go on
	loads   atomic.Int64
	mu      sync.Mutex
	models  []*gatedModel // every model loaded, in order
}

func newGated() *gated {
	return &gated{started: make(chan struct{}, 16), gate: make(chan struct{})}
}

func (g *gated) Models() []string { return []string{"chain"} }

func (g *gated) Load(model string, batch, _ int) (backends.Model, error) {
	g.loads.Add(1)
	m := &gatedModel{g: g, batch: max(batch, 1)}
	g.mu.Lock()
	g.models = append(g.models, m)
	g.mu.Unlock()
	return m, nil
}

func (g *gated) model(i int) *gatedModel {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.models[i]
}

type gatedModel struct {
	g      *gated
	batch  int
	closed atomic.Bool
	runs   atomic.Int64 // batches running now
	// closedWhileRunning: Close came while a batch ran on the model.
	closedWhileRunning atomic.Bool
}

func (m *gatedModel) Info() backends.ModelInfo {
	return backends.ModelInfo{Name: "chain", MaxBatch: m.batch, Concurrency: 1, AnyInputs: true}
}

func (m *gatedModel) Run(_ context.Context, in []api.Tensor, _ int) ([]api.Tensor, error) {
	m.runs.Add(1)
	defer m.runs.Add(-1)
	m.g.started <- struct{}{}
	<-m.g.gate
	if m.closed.Load() {
		return nil, errors.New("step 2: model closed")
	}
	return in, nil
}

func (m *gatedModel) Close() error {
	if m.runs.Load() > 0 {
		m.closedWhileRunning.Store(true)
	}
	m.closed.Store(true)
	return nil
}

// TestPlanChangeNeverClosesModelInUse is make-before-break on the backend:
// a model unloaded, or reloaded with new settings, while a batch runs on it
// (the demo's "batch of 2: step ocr-rec: onnx model closed") stays open until
// that batch returns, which it does normally, and is closed then; calls from
// the change on see the new state.
func TestPlanChangeNeverClosesModelInUse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*backends.Server) error
		after  error // what a new call gets after the change; nil: it runs
		models int   // models loaded after the change
	}{
		{"unload", func(s *backends.Server) error { return s.Unload("chain") }, backends.ErrModelNotLoaded, 1},
		{"reload with a new batch", func(s *backends.Server) error { _, err := s.Load("chain", 4, 1); return err }, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGated()
			srv, err := backends.NewServer(g, backends.ServerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b := serve(t, srv)
			load(t, b, "chain", 2, 1)
			done := make(chan error, 1)
			go func() {
				_, err := b.client.Infer(context.Background(), "chain", [][]api.Tensor{item(1, 1), item(2, 1)})
				done <- err
			}()
			<-g.started
			if err := tc.change(srv); err != nil {
				t.Fatal(err)
			}
			old := g.model(0)
			if old.closed.Load() {
				t.Fatal("the model was closed while a batch ran on it")
			}
			if got := g.loads.Load(); got != int64(tc.models) {
				t.Errorf("%d loads, want %d", got, tc.models)
			}
			if tc.after != nil {
				if _, err := b.client.Infer(context.Background(), "chain", [][]api.Tensor{item(3, 1)}); !errors.Is(err, tc.after) {
					t.Errorf("a call after the change: %v, want %v", err, tc.after)
				}
			}
			close(g.gate)
			if err := <-done; err != nil {
				t.Fatalf("the batch in flight: %v; want it to finish normally", err)
			}
			if tc.after == nil {
				if _, err := b.client.Infer(context.Background(), "chain", [][]api.Tensor{item(3, 1)}); err != nil {
					t.Errorf("a call after the change: %v", err)
				}
				<-g.started
			}
			deadline := time.Now().Add(5 * time.Second)
			for !old.closed.Load() && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if !old.closed.Load() {
				t.Error("the replaced model was never closed after its last batch returned")
			}
			if old.closedWhileRunning.Load() {
				t.Error("Close was called while a batch ran on the model")
			}
		})
	}
}

// TestLoadSameSettingsKeepsModel: a plan change that asks a backend for a
// model it has loaded with the same settings loads nothing and closes nothing.
func TestLoadSameSettingsKeepsModel(t *testing.T) {
	g := newGated()
	srv, err := backends.NewServer(g, backends.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := srv.Load("chain", 2, 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := g.loads.Load(); got != 1 {
		t.Errorf("three loads with the same settings loaded %d models, want 1", got)
	}
	if g.model(0).closed.Load() {
		t.Error("the model was closed")
	}
	if _, err := srv.Load("chain", 4, 1); err != nil {
		t.Fatal(err)
	}
	if got := g.loads.Load(); got != 2 || !g.model(0).closed.Load() {
		t.Errorf("a load with a new batch: %d models loaded (want 2), first closed %v (want true: no batch used it)", got, g.model(0).closed.Load())
	}
}
