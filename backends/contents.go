package backends

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/piccolo-serving/piccolo/api/inference"
)

// contentsToRaw encodes typed InferTensorContents as the raw little-endian bytes
// api.Tensor holds, for peers that send typed contents instead of raw contents.
// FP16 and BF16 have no typed form in the protocol and must come raw. A value
// that does not fit its datatype (INT8 300, say: the protocol carries INT8 and
// INT16 in int32 fields) is an error naming the element, never truncated.
func contentsToRaw(datatype string, c *inference.InferTensorContents) ([]byte, error) {
	var out []byte
	switch datatype {
	case "BOOL":
		out = make([]byte, len(c.GetBoolContents()))
		for i, v := range c.GetBoolContents() {
			if v {
				out[i] = 1
			}
		}
	case "INT8", "INT16", "INT32":
		size := map[string]int{"INT8": 1, "INT16": 2, "INT32": 4}[datatype]
		lo, hi := int64(-1)<<(8*size-1), int64(1)<<(8*size-1)-1
		out = make([]byte, 0, size*len(c.GetIntContents()))
		for i, v := range c.GetIntContents() {
			if int64(v) < lo || int64(v) > hi {
				return nil, fmt.Errorf("%s element %d is %d: out of range [%d, %d]", datatype, i, v, lo, hi)
			}
			out = binary.LittleEndian.AppendUint32(out, uint32(v))[:len(out)+size]
		}
	case "UINT8", "UINT16", "UINT32":
		size := map[string]int{"UINT8": 1, "UINT16": 2, "UINT32": 4}[datatype]
		hi := uint64(1)<<(8*size) - 1
		out = make([]byte, 0, size*len(c.GetUintContents()))
		for i, v := range c.GetUintContents() {
			if uint64(v) > hi {
				return nil, fmt.Errorf("%s element %d is %d: out of range [0, %d]", datatype, i, v, hi)
			}
			out = binary.LittleEndian.AppendUint32(out, v)[:len(out)+size]
		}
	case "INT64":
		for _, v := range c.GetInt64Contents() {
			out = binary.LittleEndian.AppendUint64(out, uint64(v))
		}
	case "UINT64":
		for _, v := range c.GetUint64Contents() {
			out = binary.LittleEndian.AppendUint64(out, v)
		}
	case "FP32":
		for _, v := range c.GetFp32Contents() {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
		}
	case "FP64":
		for _, v := range c.GetFp64Contents() {
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v))
		}
	case "BYTES":
		for _, v := range c.GetBytesContents() {
			out = binary.LittleEndian.AppendUint32(out, uint32(len(v)))
			out = append(out, v...)
		}
	case "FP16", "BF16":
		return nil, fmt.Errorf("%s has no typed contents in the protocol; send it raw", datatype)
	default:
		return nil, fmt.Errorf("unknown datatype %q", datatype)
	}
	if out == nil {
		out = []byte{}
	}
	return out, nil
}
