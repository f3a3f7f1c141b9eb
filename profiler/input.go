package profiler

import (
	"fmt"
	"slices"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
	"github.com/piccolo-serving/piccolo/loadgen"
)

// rowSource holds the rows that batches are built from: rows[j] lists input j's
// rows as byte slices, in order (every payload's rows, payload after payload).
type rowSource struct {
	names     []string
	datatypes []string
	inner     [][]int64 // shape after dimension 0, per input
	rows      [][][]byte
}

// newRowSource checks that every payload has the same inputs (names, datatypes,
// order, dimensions after dimension 0) and cuts them into rows.
func newRowSource(payloads []loadgen.Payload) (*rowSource, error) {
	if len(payloads) == 0 {
		return nil, fmt.Errorf("%w: no input payloads", ErrBadOptions)
	}
	first := payloads[0].Tensors
	if len(first) == 0 {
		return nil, fmt.Errorf("%w: input %s has no tensors", ErrBadOptions, payloads[0].Source)
	}
	src := &rowSource{
		names:     make([]string, len(first)),
		datatypes: make([]string, len(first)),
		inner:     make([][]int64, len(first)),
		rows:      make([][][]byte, len(first)),
	}
	for j, t := range first {
		if len(t.Shape) == 0 {
			return nil, fmt.Errorf("%w: input %s: tensor %q is a scalar; want dimension 0 to be its rows", ErrBadOptions, payloads[0].Source, t.Name)
		}
		src.names[j], src.datatypes[j], src.inner[j] = t.Name, t.Datatype, t.Shape[1:]
	}
	var offsets []int
	for _, pl := range payloads {
		if len(pl.Tensors) != len(first) {
			return nil, fmt.Errorf("%w: input %s has %d tensors, %s has %d; all inputs must carry the same tensors",
				ErrBadOptions, pl.Source, len(pl.Tensors), payloads[0].Source, len(first))
		}
		rows := int64(-1)
		for j := range pl.Tensors {
			t := &pl.Tensors[j]
			if t.Name != src.names[j] || t.Datatype != src.datatypes[j] || len(t.Shape) == 0 || !slices.Equal(t.Shape[1:], src.inner[j]) {
				return nil, fmt.Errorf("%w: input %s tensor %d is %q %s %v, %s has %q %s [n %v]; all inputs must carry the same tensors, differing only in dimension 0",
					ErrBadOptions, pl.Source, j, t.Name, t.Datatype, t.Shape, payloads[0].Source, src.names[j], src.datatypes[j], src.inner[j])
			}
			if rows >= 0 && t.Shape[0] != rows {
				return nil, fmt.Errorf("%w: input %s: tensor %q has %d rows, the first tensor %d; a request's tensors must agree in dimension 0",
					ErrBadOptions, pl.Source, t.Name, t.Shape[0], rows)
			}
			rows = t.Shape[0]
			if err := t.Validate(); err != nil {
				return nil, fmt.Errorf("%w: input %s: %w", ErrBadOptions, pl.Source, err)
			}
			var err error
			if offsets, err = t.RowOffsets(offsets[:0]); err != nil {
				return nil, fmt.Errorf("%w: input %s: %w", ErrBadOptions, pl.Source, err)
			}
			for r := 0; r+1 < len(offsets); r++ {
				src.rows[j] = append(src.rows[j], t.Data[offsets[r]:offsets[r+1]])
			}
		}
	}
	if len(src.rows[0]) == 0 {
		return nil, fmt.Errorf("%w: the inputs have 0 rows; want at least one", ErrBadOptions)
	}
	return src, nil
}

// zeroSource returns the rows of the model's declared inputs as zeros, dimension 0
// and every -1 dimension set to 1 (loadgen.ZeroPayload).
func zeroSource(inputs []backends.TensorSpec) (*rowSource, error) {
	specs := make([]loadgen.TensorSpec, len(inputs))
	for i, s := range inputs {
		specs[i] = loadgen.TensorSpec{Name: s.Name, Datatype: s.Datatype, Shape: s.Shape}
	}
	pl, err := loadgen.ZeroPayload(specs)
	if err != nil {
		return nil, fmt.Errorf("inputs from the model metadata: %w; give --input instead", err)
	}
	return newRowSource([]loadgen.Payload{pl})
}

// batch returns one item of b rows: input j's rows taken in order, cycling.
func (s *rowSource) batch(b int) []api.Tensor {
	item := make([]api.Tensor, len(s.names))
	for j := range item {
		rows := s.rows[j]
		size := 0
		for k := 0; k < b; k++ {
			size += len(rows[k%len(rows)])
		}
		data := make([]byte, 0, size)
		for k := 0; k < b; k++ {
			data = append(data, rows[k%len(rows)]...)
		}
		shape := append([]int64{int64(b)}, s.inner[j]...)
		item[j] = api.Tensor{Name: s.names[j], Datatype: s.datatypes[j], Shape: shape, Data: data}
	}
	return item
}
