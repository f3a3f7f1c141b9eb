package backends

import (
	"bytes"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/api/inference"
)

// Typed contents are range-checked against their datatype: the protocol
// carries INT8/INT16 in int32 fields and UINT8/UINT16 in uint32 ones, and a
// value that does not fit must be refused, not truncated to its low bytes.
func TestContentsToRawRange(t *testing.T) {
	for _, tc := range []struct {
		datatype string
		c        *inference.InferTensorContents
		want     []byte
		err      string
	}{
		{"INT8", &inference.InferTensorContents{IntContents: []int32{-128, 127, -1}}, []byte{0x80, 0x7f, 0xff}, ""},
		{"INT8", &inference.InferTensorContents{IntContents: []int32{1, 300}}, nil, "INT8 element 1 is 300: out of range [-128, 127]"},
		{"INT8", &inference.InferTensorContents{IntContents: []int32{-129}}, nil, "out of range [-128, 127]"},
		{"INT16", &inference.InferTensorContents{IntContents: []int32{-32768, 32767}}, []byte{0x00, 0x80, 0xff, 0x7f}, ""},
		{"INT16", &inference.InferTensorContents{IntContents: []int32{40000}}, nil, "INT16 element 0 is 40000"},
		{"INT32", &inference.InferTensorContents{IntContents: []int32{-1}}, []byte{0xff, 0xff, 0xff, 0xff}, ""},
		{"UINT8", &inference.InferTensorContents{UintContents: []uint32{0, 255}}, []byte{0x00, 0xff}, ""},
		{"UINT8", &inference.InferTensorContents{UintContents: []uint32{256}}, nil, "UINT8 element 0 is 256: out of range [0, 255]"},
		{"UINT16", &inference.InferTensorContents{UintContents: []uint32{65535, 65536}}, nil, "UINT16 element 1 is 65536"},
		{"UINT32", &inference.InferTensorContents{UintContents: []uint32{1 << 31}}, []byte{0, 0, 0, 0x80}, ""},
	} {
		got, err := contentsToRaw(tc.datatype, tc.c)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s %v: %v", tc.datatype, tc.c, err)
		case tc.err == "" && !bytes.Equal(got, tc.want):
			t.Errorf("%s %v: bytes %x, want %x", tc.datatype, tc.c, got, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s %v: err %v, want one containing %q", tc.datatype, tc.c, err, tc.err)
		}
	}
}
