package api

import (
	"fmt"
)

// Tensor is one named tensor as it travels through the gateway, the dispatcher and
// the backend client: row-major, its elements as raw little-endian bytes exactly as
// KServe v2 gRPC carries them in raw_input_contents / raw_output_contents. A BYTES
// tensor holds each element as a 4-byte little-endian length followed by the bytes
// (Triton's raw encoding). Stacking a batch on dimension 0 is concatenating Data.
//
// A Tensor is owned by one goroutine at a time; whoever passes it on stops using it.
type Tensor struct {
	Name     string
	Datatype string  // KServe v2 datatype: BOOL, UINT8..UINT64, INT8..INT64, FP16, FP32, FP64, BF16, BYTES
	Shape    []int64 // dimension 0 is the batch dimension where the model batches
	Data     []byte
	// Held, when not nil, says that a backend keeps a copy of Data: the gateway
	// asked the backend that produced the tensor to hold it (Cloudflow's
	// locality, docs/locality.md), so a later call to that backend may name it
	// by Held.Key instead of sending the bytes again. It is never encoded: the
	// edge's codecs and the config ignore it. Immutable once set.
	Held *Held `json:"-" yaml:"-"`
}

// Held is where a copy of a tensor's bytes is kept on a backend
// (Tensor.Held): the backend's placement id, the key the gateway gave it,
// and the size in bytes of the copy (a tensor whose Data has another length
// is not that copy, and is sent as it is).
type Held struct {
	Backend string
	Key     string
	Size    int
}

// HeldOn returns the key under which backend holds t's bytes, or "" when it
// holds none (no Held, another backend, or a Data of another length).
func (t *Tensor) HeldOn(backend string) string {
	if h := t.Held; h != nil && backend != "" && h.Backend == backend && h.Size == len(t.Data) {
		return h.Key
	}
	return ""
}

// ElementSize returns the size in bytes of one element of datatype, 0 for BYTES
// (variable length) and -1 for a datatype KServe v2 does not define.
func ElementSize(datatype string) int {
	switch datatype {
	case "BOOL", "UINT8", "INT8":
		return 1
	case "UINT16", "INT16", "FP16", "BF16":
		return 2
	case "UINT32", "INT32", "FP32":
		return 4
	case "UINT64", "INT64", "FP64":
		return 8
	case "BYTES":
		return 0
	}
	return -1
}

// Datatypes lists the datatypes KServe v2 defines, for error messages.
const Datatypes = "BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BF16, BYTES"

// NumElements returns the product of shape, or an error naming a negative dimension
// or an overflow.
func NumElements(shape []int64) (int64, error) {
	n := int64(1)
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("shape %v: dimension %d is %d; dimensions must be ≥ 0", shape, i, d)
		}
		if d != 0 && n > (1<<40)/d {
			return 0, fmt.Errorf("shape %v: more than 2^40 elements", shape)
		}
		n *= d
	}
	return n, nil
}

// Validate checks that t's datatype is known and that Data holds exactly the
// elements its shape promises. It does not copy.
func (t *Tensor) Validate() error {
	size := ElementSize(t.Datatype)
	if size < 0 {
		return fmt.Errorf("tensor %q: unknown datatype %q; allowed: %s", t.Name, t.Datatype, Datatypes)
	}
	n, err := NumElements(t.Shape)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if size > 0 {
		if int64(len(t.Data)) != n*int64(size) {
			return fmt.Errorf("tensor %q: %s shape %v needs %d bytes, got %d", t.Name, t.Datatype, t.Shape, n*int64(size), len(t.Data))
		}
		return nil
	}
	// BYTES: walk the length prefixes.
	var count int64
	for off := 0; off < len(t.Data); count++ {
		if off+4 > len(t.Data) {
			return fmt.Errorf("tensor %q: BYTES element %d: truncated length prefix", t.Name, count)
		}
		l := int(uint32(t.Data[off]) | uint32(t.Data[off+1])<<8 | uint32(t.Data[off+2])<<16 | uint32(t.Data[off+3])<<24)
		off += 4
		if l < 0 || off+l > len(t.Data) {
			return fmt.Errorf("tensor %q: BYTES element %d: length %d runs past the data", t.Name, count, l)
		}
		off += l
	}
	if count != n {
		return fmt.Errorf("tensor %q: BYTES shape %v needs %d elements, got %d", t.Name, t.Shape, n, count)
	}
	return nil
}

// ZeroTensor returns a tensor of zeros for a declared input (name, datatype
// and shape as a model's metadata gives them, -1 for a variable dimension):
// dimension 0 set to rows (a declared scalar becomes [rows]), every other
// variable dimension set to 1; a BYTES element is an empty string (a zero
// length prefix), a BOOL one false. limit, when positive, bounds its
// elements. Errors name the input: an unknown datatype (with the allowed
// ones), a shape that overflows, or one over limit. The load generator's
// and profiler's default inputs and the gateway's warm-up batches are built
// with it.
func ZeroTensor(name, datatype string, shape []int64, rows int, limit int64) (Tensor, error) {
	size := ElementSize(datatype)
	if size < 0 {
		return Tensor{}, fmt.Errorf("input %q: unknown datatype %q; allowed: %s", name, datatype, Datatypes)
	}
	s := make([]int64, max(len(shape), 1))
	copy(s, shape)
	s[0] = int64(rows)
	for j := 1; j < len(s); j++ {
		if s[j] < 0 {
			s[j] = 1
		}
	}
	n, err := NumElements(s)
	if err != nil {
		return Tensor{}, fmt.Errorf("input %q: %w", name, err)
	}
	if limit > 0 && n > limit {
		return Tensor{}, fmt.Errorf("input %q: shape %v is %d elements, over %d", name, s, n, limit)
	}
	if size == 0 { // BYTES: each element a 4-byte zero length
		size = 4
	}
	return Tensor{Name: name, Datatype: datatype, Shape: s, Data: make([]byte, n*int64(size))}, nil
}
