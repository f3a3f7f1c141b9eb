package kserve

import (
	"encoding/binary"
	"math"
	"strconv"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
)

// decodeData reads an input's "data" into t.Data, which grows as elements
// are read (doubling, up to the size the shape promises, each growth taken
// from the request's hold of the in-flight budget): never allocated from the
// declared shape before the bytes are there, so a body declaring a huge
// tensor it does not hold costs what it holds. It checks the data against
// t.Shape before anything is queued. The data are either flat (one array of every element, row-major) or
// nested exactly as the shape: an array of shape[0] arrays of shape[1] ...
// of scalars. Anything else (a nesting the shape does not have, arrays of
// unequal lengths, scalars beside arrays) is refused as ragged, naming where.
func decodeData(s *scanner, t *api.Tensor, dt dtype) error {
	n, _ := api.NumElements(t.Shape) // checked in decodeShape
	size := api.ElementSize(t.Datatype)
	// Cap the preallocation by what the body could possibly hold (every element
	// takes at least two bytes of JSON), so a huge shape cannot allocate huge memory.
	if limit := int64(len(s.b)-s.i) / 2; n > limit {
		return gateway.BadInput("input %q: shape %v needs %d elements, more than the request body holds", t.Name, t.Shape, n)
	}
	want := n * int64(size) // the shape's bytes; BYTES: unknown (0), grown by append
	first := min(want, firstDataCap)
	if size == 0 {
		first = min(n*8, firstDataCap)
	}
	if err := s.take(int(first)); err != nil {
		return err
	}
	t.Data = make([]byte, 0, first)
	if s.peek() != '[' {
		return gateway.BadInput("input %q: \"data\" must be an array", t.Name)
	}
	s.i++
	d := dataDecoder{s: s, t: t, dt: dt, size: size, want: want, taken: int(first)}
	if len(t.Shape) > 1 && s.peek() == '[' {
		return d.nested(0)
	}
	got, err := d.leaves(n, -1)
	if err != nil {
		return err
	}
	if got != n {
		return gateway.BadInput("input %q: shape %v needs %d elements, data has %d", t.Name, t.Shape, n, got)
	}
	return nil
}

// dataDecoder reads one input's data; path is the index of the array being
// read at each depth of nested data, for the error messages.
type dataDecoder struct {
	s     *scanner
	t     *api.Tensor
	dt    dtype
	count int64 // elements read so far, row-major
	path  [maxDepth]int64
	size  int   // bytes of an element; 0: BYTES (variable)
	want  int64 // bytes the shape promises; 0 for BYTES
	taken int   // cap of t.Data taken from the hold
}

// firstDataCap is the most t.Data is allocated with before its elements are
// read; it grows from there as they arrive.
const firstDataCap = 4 << 10

// grow makes room for one more fixed-size element: twice the capacity, at
// most the shape's bytes, the new array taken from the request's hold (the
// old one stays taken: it is garbage the collector has not yet freed).
func (d *dataDecoder) grow() error {
	c := int(min(max(2*int64(cap(d.t.Data)), firstDataCap), d.want))
	if c < len(d.t.Data)+d.size {
		c = len(d.t.Data) + d.size
	}
	// Taken whole: the old array is garbage, memory until the collector runs.
	if err := d.s.take(c); err != nil {
		return err
	}
	d.taken = c
	nb := make([]byte, len(d.t.Data), c)
	copy(nb, d.t.Data)
	d.t.Data = nb
	return nil
}

// nested reads the array at depth (its '[' consumed), which must have
// t.Shape[depth] elements: arrays above the last dimension, scalars at it.
func (d *dataDecoder) nested(depth int) error {
	s, shape := d.s, d.t.Shape
	want := shape[depth]
	if depth == len(shape)-1 {
		got, err := d.leaves(want, depth)
		if err != nil {
			return err
		}
		if got != want {
			return d.ragged(depth, got)
		}
		return nil
	}
	var got int64
	for first := true; ; first = false {
		ok, err := s.more(']', first)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if got == want {
			return d.ragged(depth, got+1)
		}
		if s.peek() != '[' {
			d.path[depth] = got
			return gateway.BadInput("input %q: ragged data: %s is not an array; data nested as shape %v has arrays down to depth %d",
				d.t.Name, d.where(depth+1), shape, len(shape))
		}
		s.i++
		d.path[depth] = got
		if err := d.nested(depth + 1); err != nil {
			return err
		}
		got++
	}
	if got != want {
		return d.ragged(depth, got)
	}
	return nil
}

// ragged is the error for an array at depth with got elements where the shape
// wants t.Shape[depth].
func (d *dataDecoder) ragged(depth int, got int64) error {
	what := "has"
	if got > d.t.Shape[depth] {
		what = "has more than"
		got--
	}
	return gateway.BadInput("input %q: ragged data: %s %s %d elements; shape %v wants %d at depth %d",
		d.t.Name, d.where(depth), what, got, d.t.Shape, d.t.Shape[depth], depth+1)
}

// where names the array at depth by its path: "data", "data[1]", "data[1][0]".
func (d *dataDecoder) where(depth int) string {
	b := []byte("data")
	for _, i := range d.path[:depth] {
		b = append(b, '[')
		b = strconv.AppendInt(b, i, 10)
		b = append(b, ']')
	}
	return string(b)
}

// leaves reads scalars up to the array's ']' (its '[' consumed) and returns
// how many; it stops with an error past max. depth is the array's depth in
// nested data, -1 for flat data (where an array element is refused).
func (d *dataDecoder) leaves(max int64, depth int) (int64, error) {
	s := d.s
	var got int64
	if s.peek() == ']' {
		s.i++
		return 0, nil
	}
	for {
		if got == max {
			if depth < 0 {
				return got, gateway.BadInput("input %q: shape %v needs %d elements, data has more", d.t.Name, d.t.Shape, max)
			}
			return got, d.ragged(depth, got+1)
		}
		c := s.peek()
		if c == '[' {
			if depth < 0 {
				return got, gateway.BadInput("input %q: ragged data: data[%d] is an array among scalars; send data flat, or nested exactly as shape %v", d.t.Name, got, d.t.Shape)
			}
			return got, gateway.BadInput("input %q: ragged data: %s[%d] is an array; shape %v has scalars at depth %d", d.t.Name, d.where(depth), got, d.t.Shape, depth+1)
		}
		if d.size > 0 && len(d.t.Data)+d.size > cap(d.t.Data) {
			if err := d.grow(); err != nil {
				return got, err
			}
		}
		var err error
		if d.t.Data, err = appendElement(s, d.t.Data, d.dt, c); err != nil {
			return got, gateway.BadInput("input %q: data element %d: %v", d.t.Name, d.count, err)
		}
		if c := cap(d.t.Data); c > d.taken { // BYTES grown by append
			if err := s.take(c - d.taken); err != nil {
				return got, err
			}
			d.taken = c
		}
		d.count++
		got++
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return got, nil
		case 0:
			return got, s.errf("unexpected end of input, want ',' or ']'")
		default:
			return got, s.errf("want ',' or ']', got %q", s.b[s.i])
		}
	}
}

// elemError is an element-level problem; leaves adds the input and index.
type elemError string

func (e elemError) Error() string { return string(e) }

// appendElement reads one scalar of type dt, whose first byte is c, and
// appends its little-endian bytes. Numbers are converted from what the scanner
// read in its one pass over the literal (num), rounding once to dt.
func appendElement(s *scanner, dst []byte, dt dtype, c byte) ([]byte, error) {
	switch dt {
	case dtBool:
		switch {
		case s.literal("true"):
			return append(dst, 1), nil
		case s.literal("false"):
			return append(dst, 0), nil
		}
		return dst, elemError("want true or false for BOOL")
	case dtBytes:
		if c != '"' {
			return dst, elemError("want a string for BYTES")
		}
		v, err := s.str()
		if err != nil {
			return dst, err
		}
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(v)))
		return append(dst, v...), nil
	}
	if c != '-' && (c < '0' || c > '9') {
		return dst, elemError("want a number for " + dtypeNames[dt])
	}
	var n num
	if err := s.number(&n); err != nil {
		return dst, err
	}
	switch dt {
	case dtFP32:
		f, ok := n.float32()
		if !ok {
			return dst, elemError(string(n.lit) + " is out of range for FP32")
		}
		return binary.LittleEndian.AppendUint32(dst, math.Float32bits(f)), nil
	case dtFP64:
		f, ok := n.float64()
		if !ok {
			return dst, elemError(string(n.lit) + " is out of range for a 64-bit float")
		}
		return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f)), nil
	case dtFP16:
		f, ok := n.float32()
		if !ok || math.Abs(float64(f)) > 65504 {
			return dst, elemError(string(n.lit) + " is out of range for FP16 (±65504)")
		}
		return binary.LittleEndian.AppendUint16(dst, n.roundOnce(f, api.Float16Bits)), nil
	case dtBF16:
		f, ok := n.float32()
		h := n.roundOnce(f, api.BFloat16Bits)
		if !ok || h&0x7fff == 0x7f80 { // rounded to ±Inf
			return dst, elemError(string(n.lit) + " is out of range for BF16")
		}
		return binary.LittleEndian.AppendUint16(dst, h), nil
	}
	if !n.isInt {
		return dst, elemError(string(n.lit) + " is not an integer; " + dtypeNames[dt] + " wants integers")
	}
	if dt == dtUint64 {
		u, ok := n.uint64()
		if !ok {
			return dst, elemError(string(n.lit) + " is out of range for UINT64 (0..18446744073709551615)")
		}
		return binary.LittleEndian.AppendUint64(dst, u), nil
	}
	v, ok := n.int64()
	lo, hi := intRange(dt)
	if !ok || v < lo || v > hi {
		return dst, elemError(string(n.lit) + " is out of range for " + dtypeNames[dt] + " (" + strconv.FormatInt(lo, 10) + ".." + strconv.FormatInt(hi, 10) + ")")
	}
	switch dt {
	case dtInt8, dtUint8:
		return append(dst, byte(v)), nil
	case dtInt16, dtUint16:
		return binary.LittleEndian.AppendUint16(dst, uint16(v)), nil
	case dtInt32, dtUint32:
		return binary.LittleEndian.AppendUint32(dst, uint32(v)), nil
	default: // INT64
		return binary.LittleEndian.AppendUint64(dst, uint64(v)), nil
	}
}
