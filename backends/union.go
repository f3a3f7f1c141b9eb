package backends

import (
	"fmt"
	"sort"
	"strings"
)

// Union is an Executor made of several: it offers every model of each and loads
// a model on the executor that has it. One backend process can so serve, e.g.,
// the Go processing modules of backends/builtin beside the ONNX models of
// backends/onnx (`piccolo backend --executor ocr`). Immutable after NewUnion.
type Union struct {
	owner  map[string]Executor
	models []string
}

var _ Executor = (*Union)(nil)

// NewUnion returns the union of execs. A model offered by two of them is an
// error naming it: which one should run it would be a guess.
func NewUnion(execs ...Executor) (*Union, error) {
	u := &Union{owner: map[string]Executor{}}
	for i, e := range execs {
		if e == nil {
			return nil, fmt.Errorf("backends: NewUnion: executor %d is nil", i)
		}
		for _, m := range e.Models() {
			if _, dup := u.owner[m]; dup {
				return nil, fmt.Errorf("backends: NewUnion: model %q is offered by two executors; each model must have one", m)
			}
			u.owner[m] = e
			u.models = append(u.models, m)
		}
	}
	sort.Strings(u.models)
	return u, nil
}

// Models lists every executor's models, sorted.
func (u *Union) Models() []string { return u.models }

// Load loads model on the executor that offers it; errors wrap ErrUnknownModel
// for a model none offers, or the executor's error.
func (u *Union) Load(model string, batch, concurrency int) (Model, error) {
	e, ok := u.owner[model]
	if !ok {
		return nil, fmt.Errorf("%w: %q; models: %s", ErrUnknownModel, model, strings.Join(u.models, ", "))
	}
	return e.Load(model, batch, concurrency)
}
