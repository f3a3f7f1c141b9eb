package api

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The rules below are the batch dimension's, in one place: a tensor's
// dimension 0 counts its rows, an item's tensors agree on it, and items whose
// tensors agree on everything else can be stacked into one batch and split
// back (KServe v2 batching; the dispatcher's batches, paper §III-B).

// RowOffsets appends to dst the byte offsets of the rows (dimension 0) of t,
// rows+1 offsets in all, the last being len(t.Data), and returns the extended
// slice. Pass a reused dst to avoid allocating. t must be valid (Validate) and
// have at least one dimension. For a fixed-size datatype the rows are equal
// slices; for BYTES the length prefixes are walked.
func (t *Tensor) RowOffsets(dst []int) ([]int, error) {
	if len(t.Shape) == 0 {
		return dst, fmt.Errorf("tensor %q: scalar has no batch dimension", t.Name)
	}
	rows := int(t.Shape[0])
	size := ElementSize(t.Datatype)
	if size < 0 {
		return dst, fmt.Errorf("tensor %q: unknown datatype %q; allowed: %s", t.Name, t.Datatype, Datatypes)
	}
	if size > 0 {
		if rows == 0 {
			return append(dst, 0), nil
		}
		step := len(t.Data) / rows
		if step*rows != len(t.Data) {
			return dst, fmt.Errorf("tensor %q: %d bytes do not split into %d rows", t.Name, len(t.Data), rows)
		}
		for i := 0; i <= rows; i++ {
			dst = append(dst, i*step)
		}
		return dst, nil
	}
	perRow, err := NumElements(t.Shape[1:])
	if err != nil {
		return dst, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	off := 0
	dst = append(dst, 0)
	for i := 0; i < rows; i++ {
		for e := int64(0); e < perRow; e++ {
			if off+4 > len(t.Data) {
				return dst, fmt.Errorf("tensor %q: row %d: BYTES data truncated", t.Name, i)
			}
			l := int(binary.LittleEndian.Uint32(t.Data[off:]))
			off += 4
			if l < 0 || l > len(t.Data)-off {
				return dst, fmt.Errorf("tensor %q: row %d: BYTES element of %d bytes runs past the data", t.Name, i, l)
			}
			off += l
		}
		dst = append(dst, off)
	}
	if off != len(t.Data) {
		return dst, fmt.Errorf("tensor %q: %d bytes after the last of %d rows", t.Name, len(t.Data)-off, rows)
	}
	return dst, nil
}

// Rows returns the number of rows of one item: the dimension 0 its tensors
// share. Errors name a scalar, or a tensor whose dimension 0 differs from the
// first tensor's; no tensors is an error too.
func Rows(item []Tensor) (int64, error) {
	if len(item) == 0 {
		return 0, errors.New("no tensors")
	}
	for i := range item {
		t := &item[i]
		if len(t.Shape) == 0 {
			return 0, fmt.Errorf("tensor %q is a scalar; dimension 0 must count the rows", t.Name)
		}
		if t.Shape[0] != item[0].Shape[0] {
			return 0, fmt.Errorf("tensor %q has %d rows, tensor %q has %d; an item's tensors must agree in dimension 0",
				t.Name, t.Shape[0], item[0].Name, item[0].Shape[0])
		}
	}
	return item[0].Shape[0], nil
}

// CanBatch reports whether items a and b can share a batch, stacked on
// dimension 0: the same tensors in the same order (names, datatypes, ranks),
// every one of rank ≥ 1 and equal in every dimension after 0. It returns nil
// or an error naming the first tensor that differs (say which item is which
// in the caller's wrap). It allocates only on a mismatch.
func CanBatch(a, b []Tensor) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d tensors against %d; items of one batch need the same tensors", len(b), len(a))
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Name != y.Name || x.Datatype != y.Datatype || len(x.Shape) != len(y.Shape) {
			return fmt.Errorf("tensor %d is %q %s%v against %q %s%v; items of one batch need the same tensors in the same order",
				i, y.Name, y.Datatype, y.Shape, x.Name, x.Datatype, x.Shape)
		}
		if len(x.Shape) == 0 {
			return fmt.Errorf("tensor %q is a scalar; batching needs dimension 0", x.Name)
		}
		for d := 1; d < len(x.Shape); d++ {
			if x.Shape[d] != y.Shape[d] {
				return fmt.Errorf("tensor %q has shape %v against %v; only dimension 0 may differ within a batch", x.Name, y.Shape, x.Shape)
			}
		}
	}
	return nil
}

// SplitRows splits the tensors of one item, which agree in dimension 0 (n
// rows, Rows), into n items of one row each: the same tensors of shape
// [1, rest...]. Data is shared, not copied. The tensors must be valid
// (Validate); errors are Rows' and RowOffsets'.
func SplitRows(item []Tensor) ([][]Tensor, error) {
	n, err := Rows(item)
	if err != nil {
		return nil, err
	}
	out := make([][]Tensor, n)
	backing := make([]Tensor, int(n)*len(item))
	for i := range out {
		out[i] = backing[i*len(item) : (i+1)*len(item) : (i+1)*len(item)]
	}
	var offsets []int
	for j := range item {
		t := &item[j]
		if offsets, err = t.RowOffsets(offsets[:0]); err != nil {
			return nil, err
		}
		rank := len(t.Shape)
		shapes := make([]int64, rank*int(n)) // one backing for every row's shape
		for i := range out {
			s := shapes[i*rank : (i+1)*rank : (i+1)*rank]
			copy(s, t.Shape)
			s[0] = 1
			lo, hi := offsets[i], offsets[i+1]
			out[i][j] = Tensor{Name: t.Name, Datatype: t.Datatype, Shape: s, Data: t.Data[lo:hi:hi]}
		}
	}
	return out, nil
}
