package backends

import (
	"encoding/binary"
	"fmt"

	"github.com/piccolo-serving/piccolo/api"
)

// RowOffsets appends to dst the byte offsets of the rows (dimension 0) of t,
// rows+1 offsets in all, the last being len(t.Data), and returns the extended
// slice. Pass a reused dst to avoid allocating. t must be valid (t.Validate) and
// have at least one dimension. For a fixed-size datatype the rows are equal
// slices; for BYTES the length prefixes are walked.
func RowOffsets(t *api.Tensor, dst []int) ([]int, error) {
	if len(t.Shape) == 0 {
		return dst, fmt.Errorf("tensor %q: scalar has no batch dimension", t.Name)
	}
	rows := int(t.Shape[0])
	size := api.ElementSize(t.Datatype)
	if size < 0 {
		return dst, fmt.Errorf("tensor %q: unknown datatype %q; allowed: %s", t.Name, t.Datatype, api.Datatypes)
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
	perRow, err := api.NumElements(t.Shape[1:])
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
