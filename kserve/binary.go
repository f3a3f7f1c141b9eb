package kserve

import (
	"strconv"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
)

// HeaderContentLength is the HTTP header of the binary tensor data extension
// (Triton's, adopted by KServe): on a request or response, the length in bytes
// of the JSON inference header at the start of the body; the tensors' binary
// data follow it.
const HeaderContentLength = "Inference-Header-Content-Length"

// binaryExt is what the binary tensor data extension adds to one HTTP request:
// which inputs' data follow the JSON header, and which outputs go back in
// binary. Its zero value is a plain JSON request; it lives on the handler's
// stack, and its slices are allocated only when a request uses the extension.
type binaryExt struct {
	binaryIn bool    // the request has the Inference-Header-Content-Length header
	sizes    []int64 // per input, its binary_data_size or -1 (JSON data); nil: none binary
	allOut   bool    // request parameter "binary_data_output": every output binary by default
	outBin   []int8  // per requested output (req.Outputs): 1 binary, -1 JSON, 0 the default; nil: none said
	outNames []string
	// budget is the in-flight budget the request's decoded bytes are taken
	// from (nil: none), held the bytes taken, which the caller gives back.
	// A count, not a pointer to the request's hold: that would move the
	// hold to the heap, one allocation per request.
	budget *inflightBudget
	held   int64
}

// budgetOf returns the request's in-flight budget, nil without one.
func (e *binaryExt) budgetOf() *inflightBudget {
	if e == nil {
		return nil
	}
	return e.budget
}

// take takes n bytes from the budget for the request (held).
func (e *binaryExt) take(n int) error {
	if err := e.budget.take(n); err != nil {
		return err
	}
	if e.budget != nil && n > 0 {
		e.held += int64(n)
	}
	return nil
}

// binaryOutput reports whether the response output named name goes in binary.
func (e *binaryExt) binaryOutput(name string) bool {
	if e == nil {
		return false
	}
	for i, b := range e.outBin {
		if b != 0 && e.outNames[i] == name {
			return b > 0
		}
	}
	return e.allOut
}

// anyBinaryOutput reports whether any output may go in binary.
func (e *binaryExt) anyBinaryOutput() bool {
	if e.allOut {
		return true
	}
	for _, b := range e.outBin {
		if b > 0 {
			return true
		}
	}
	return false
}

// DecodeBinaryInferRequest decodes a request of the binary tensor data
// extension: the first headerLen bytes of body are the JSON inference header
// (as DecodeInferRequest reads it, except that an input may carry
// "parameters": {"binary_data_size": S} instead of "data"), and the rest of the
// body is the binary data of those inputs, concatenated in input order: each
// little-endian, row-major; BOOL one byte an element; BYTES each element a
// 4-byte little-endian length and its bytes. The decoded tensors own a copy of
// the binary data (one allocation for all of them).
//
// Every error matches ErrBadInput: a header length outside the body, a size
// that overruns the body, sizes that do not add up to the bytes after the
// header, a size that disagrees with the input's shape and datatype, an input
// with both "data" and binary_data_size.
func DecodeBinaryInferRequest(body []byte, headerLen int, req *gateway.InferRequest) error {
	var ext binaryExt
	return decodeBinary(body, headerLen, req, &ext)
}

// parseHeaderLen parses the Inference-Header-Content-Length value v against a
// body of bodyLen bytes.
func parseHeaderLen(v []byte, bodyLen int) (int, error) {
	n, ok := parseInt(v)
	if !ok || n < 0 {
		return 0, gateway.BadInput("header %s: %q is not a byte count; want the JSON header's length, 0 < N <= %d (the body's length)", HeaderContentLength, v, bodyLen)
	}
	if n == 0 || n > int64(bodyLen) {
		return 0, gateway.BadInput("header %s: %d is beyond the body of %d bytes; want the JSON header's length, 0 < N <= %d", HeaderContentLength, n, bodyLen, bodyLen)
	}
	return int(n), nil
}

func decodeBinary(body []byte, headerLen int, req *gateway.InferRequest, ext *binaryExt) error {
	if headerLen <= 0 || headerLen > len(body) {
		*req = gateway.InferRequest{}
		return gateway.BadInput("header %s: %d is beyond the body of %d bytes; want the JSON header's length, 0 < N <= %d", HeaderContentLength, headerLen, len(body), len(body))
	}
	ext.binaryIn = true
	if err := decodeRequest(body[:headerLen], req, ext); err != nil {
		return err
	}
	tail := body[headerLen:]
	if ext.sizes == nil {
		if len(tail) > 0 {
			return gateway.BadInput("the body has %d bytes after the %d-byte JSON header (%s) but no input has \"binary_data_size\"; allowed: no bytes after the header",
				len(tail), headerLen, HeaderContentLength)
		}
		return nil
	}
	// One copy for all inputs: the body is the server's buffer, reused after
	// the handler returns. Full slice expressions keep each input's cap its own.
	if err := ext.take(len(tail)); err != nil {
		return err
	}
	data := make([]byte, len(tail))
	copy(data, tail)
	off := int64(0)
	for i := range req.Inputs {
		size := ext.sizes[i]
		if size < 0 {
			continue
		}
		t := &req.Inputs[i]
		if size > int64(len(data))-off {
			return gateway.BadInput("input %q: binary_data_size %d overruns the body: %d bytes of binary data are left after the inputs before it (%d after the %d-byte JSON header)",
				t.Name, size, int64(len(data))-off, len(data), headerLen)
		}
		t.Data = data[off : off+size : off+size]
		off += size
		if err := checkBinaryInput(t, size); err != nil {
			return err
		}
	}
	if off != int64(len(data)) {
		return gateway.BadInput("the inputs' binary_data_size add up to %d bytes but the body has %d bytes after the %d-byte JSON header (%s); they must be equal",
			off, len(data), headerLen, HeaderContentLength)
	}
	return nil
}

// checkBinaryInput checks that an input's binary data fit its shape and datatype.
func checkBinaryInput(t *api.Tensor, size int64) error {
	n, _ := api.NumElements(t.Shape) // checked in decodeShape
	if es := api.ElementSize(t.Datatype); es > 0 {
		if want := n * int64(es); size != want {
			return gateway.BadInput("input %q: binary_data_size %d does not fit %s shape %v: want %d bytes (%d elements of %d bytes)",
				t.Name, size, t.Datatype, t.Shape, want, n, es)
		}
		return nil
	}
	if err := t.Validate(); err != nil {
		return gateway.BadInput("input %q: binary BYTES data do not fit shape %v (want %d elements, each a 4-byte little-endian length and its bytes): %v",
			t.Name, t.Shape, n, err)
	}
	return nil
}

// appendBinaryInferResponse appends r as the binary extension's response: the
// JSON header (outputs ext asks in binary carry "parameters":
// {"binary_data_size": S} and no "data"), then those outputs' raw bytes in
// output order. It returns the JSON header's length for
// Inference-Header-Content-Length. Errors as AppendInferResponse.
func appendBinaryInferResponse(dst []byte, r *gateway.InferResponse, ext *binaryExt) ([]byte, int, error) {
	start := len(dst)
	dst, err := appendResponse(dst, r, ext)
	if err != nil {
		return dst, 0, err
	}
	headerLen := len(dst) - start
	for i := range r.Outputs {
		if ext.binaryOutput(r.Outputs[i].Name) {
			dst = append(dst, r.Outputs[i].Data...)
		}
	}
	return dst, headerLen, nil
}

// appendBinaryMeta appends the output's binary parameters in place of its data.
func appendBinaryMeta(dst []byte, t *api.Tensor) []byte {
	dst = append(dst, `],"parameters":{"binary_data_size":`...)
	dst = strconv.AppendInt(dst, int64(len(t.Data)), 10)
	return append(dst, "}}"...)
}
