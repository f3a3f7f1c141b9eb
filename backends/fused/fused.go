package fused

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
)

// Sep joins the steps' model names into a fused model's name.
const Sep = "+"

// Name returns the fused model name of the chain models: "a+b+c".
func Name(models ...string) string { return strings.Join(models, Sep) }

// Steps splits a fused model name into its steps' model names; a name without
// Sep is one step.
func Steps(name string) []string { return strings.Split(name, Sep) }

// Executor offers the models of an inner executor and fused chains of them.
// Immutable after New.
type Executor struct {
	inner  backends.Executor
	known  map[string]bool // inner models
	models []string        // inner models and the declared chains, sorted
}

var _ backends.Executor = (*Executor)(nil)

// New returns an executor offering inner's models and the fused chains named in
// chains (each "a+b+…" of inner models, listed by Models; Load accepts other
// chains too). An empty or unknown step, or a chain of one model, is an error
// naming it.
func New(inner backends.Executor, chains ...string) (*Executor, error) {
	if inner == nil {
		return nil, errors.New("fused: New: inner executor is nil")
	}
	e := &Executor{inner: inner, known: map[string]bool{}}
	for _, m := range inner.Models() {
		if strings.Contains(m, Sep) {
			return nil, fmt.Errorf("fused: New: inner model %q contains %q, which names fused chains", m, Sep)
		}
		e.known[m] = true
		e.models = append(e.models, m)
	}
	seen := map[string]bool{}
	for _, c := range chains {
		if err := e.checkChain(c); err != nil {
			return nil, fmt.Errorf("fused: New: %w", err)
		}
		if !seen[c] {
			seen[c] = true
			e.models = append(e.models, c)
		}
	}
	sort.Strings(e.models)
	return e, nil
}

func (e *Executor) checkChain(name string) error {
	steps := Steps(name)
	if len(steps) < 2 {
		return fmt.Errorf("%w: fused model %q: want at least two models joined with %q", backends.ErrUnknownModel, name, Sep)
	}
	for _, s := range steps {
		if !e.known[s] {
			return fmt.Errorf("%w: step %q of fused model %q; models: %s", backends.ErrUnknownModel, s, name, strings.Join(e.inner.Models(), ", "))
		}
	}
	return nil
}

// Models lists the inner models and the declared fused chains, sorted.
func (e *Executor) Models() []string { return e.models }

// Load loads an inner model on the inner executor, or a fused chain: every step
// with batch and concurrency. Errors wrap ErrUnknownModel (a step no one
// offers), ErrInvalidInput (a fan-out step before the last), or a step's error.
func (e *Executor) Load(model string, batch, concurrency int) (backends.Model, error) {
	if !strings.Contains(model, Sep) {
		return e.inner.Load(model, batch, concurrency)
	}
	if err := e.checkChain(model); err != nil {
		return nil, err
	}
	names := Steps(model)
	m := &Model{steps: make([]backends.Model, 0, len(names))}
	for i, name := range names {
		s, err := e.inner.Load(name, batch, concurrency)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("fused model %q: step %s: %w", model, name, err)
		}
		m.steps = append(m.steps, s)
		if s.Info().FanOut && i < len(names)-1 {
			m.Close()
			return nil, fmt.Errorf("%w: fused model %q: step %s fans out (any number of rows per item), so it can only be the last step", backends.ErrInvalidInput, model, name)
		}
	}
	first, last := m.steps[0].Info(), m.steps[len(m.steps)-1].Info()
	m.info = backends.ModelInfo{
		Name:        model,
		Platform:    "piccolo_fused",
		MaxBatch:    first.MaxBatch,
		Concurrency: first.Concurrency,
		Inputs:      first.Inputs,
		AnyInputs:   first.AnyInputs,
		Outputs:     last.Outputs,
		FanOut:      last.FanOut,
	}
	m.info.Inputs = chainInputs(m.steps)
	for _, s := range m.steps[1:] {
		i := s.Info()
		m.info.MaxBatch = min(m.info.MaxBatch, i.MaxBatch)
		m.info.Concurrency = min(m.info.Concurrency, i.Concurrency)
	}
	return m, nil
}

// chainInputs lists the first step's inputs, then those of later steps that no
// step before produces (tensors an ONNX step passes through, e.g. ocr-rotate's
// crop after ocr-cls): what a request to the chain must carry.
func chainInputs(steps []backends.Model) []backends.TensorSpec {
	have := map[string]bool{}
	var in []backends.TensorSpec
	for _, s := range steps {
		info := s.Info()
		for _, t := range info.Inputs {
			if !have[t.Name] {
				have[t.Name] = true
				in = append(in, t)
			}
		}
		for _, t := range info.Outputs {
			have[t.Name] = true
		}
	}
	return in
}

// Model is a loaded fused chain.
type Model struct {
	info  backends.ModelInfo
	steps []backends.Model
}

var _ backends.Model = (*Model)(nil)

// Info describes the chain (see the package doc).
func (m *Model) Info() backends.ModelInfo { return m.info }

// Run runs the steps in order on one batch of n items, each step's outputs the
// next one's inputs, and returns the last step's outputs. A step's error is
// returned naming the step.
func (m *Model) Run(ctx context.Context, inputs []api.Tensor, n int) ([]api.Tensor, error) {
	out, _, err := m.RunTimed(ctx, inputs, n)
	return out, err
}

var _ backends.TimedModel = (*Model)(nil)

// RunTimed is Run with the chain's Timing: the sums of its steps' (each
// step's own when it reports one, else its wall time as Compute).
func (m *Model) RunTimed(ctx context.Context, inputs []api.Tensor, n int) ([]api.Tensor, backends.Timing, error) {
	t := inputs
	var sum backends.Timing
	for _, s := range m.steps {
		if err := ctx.Err(); err != nil {
			return nil, backends.Timing{}, err
		}
		out, tm, err := backends.RunTimed(ctx, s, t, n)
		if err != nil {
			return nil, backends.Timing{}, fmt.Errorf("step %s: %w", s.Info().Name, err)
		}
		sum.Queue += tm.Queue
		sum.Compute += tm.Compute
		t = out
	}
	return t, sum, nil
}

// Close closes every step; it returns their errors joined.
func (m *Model) Close() error {
	var errs []error
	for _, s := range m.steps {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
