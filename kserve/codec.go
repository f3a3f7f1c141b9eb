package kserve

import (
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
)

// dtype is a KServe v2 datatype as a small integer, so the per-element loops
// switch on an int rather than compare strings.
type dtype uint8

const (
	dtInvalid dtype = iota
	dtBool
	dtUint8
	dtUint16
	dtUint32
	dtUint64
	dtInt8
	dtInt16
	dtInt32
	dtInt64
	dtFP16
	dtFP32
	dtFP64
	dtBF16
	dtBytes
)

var dtypeNames = [...]string{"", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BF16", "BYTES"}

func parseDtype(b []byte) dtype {
	for i := 1; i < len(dtypeNames); i++ {
		if string(b) == dtypeNames[i] {
			return dtype(i)
		}
	}
	return dtInvalid
}

func dtypeOf(s string) dtype {
	for i := 1; i < len(dtypeNames); i++ {
		if s == dtypeNames[i] {
			return dtype(i)
		}
	}
	return dtInvalid
}

// DecodeInferRequest decodes a KServe v2 JSON infer request body into req
// (overwriting it). `data` is flat (every element, row-major) or nested exactly
// as `shape`; either way it must hold the shape's elements (decodeData).
// BYTES data are JSON strings; numbers are rounded once to the datatype, -0
// keeps its sign in the float types. A key may appear once in an object
// (RFC 8259 leaves duplicates to the reader; we refuse them, naming the key),
// a null value is an absent field, and unknown keys are ignored; an input
// with "binary_data_size" (the binary tensor data extension) is refused here:
// such a body comes with the Inference-Header-Content-Length header and
// DecodeBinaryInferRequest reads it. Every error matches ErrBadInput and
// names the input, the element and what is allowed.
func DecodeInferRequest(body []byte, req *gateway.InferRequest) error {
	return decodeRequest(body, req, nil)
}

// decodeRequest decodes the JSON request (or, with the binary extension, its
// JSON header) into req. ext, when not nil, collects the binary extension's
// parameters: the inputs' binary_data_size (accepted only when ext.binaryIn)
// and which outputs are asked for in binary. With ext nil those parameters are
// refused or ignored as DecodeInferRequest says.
func decodeRequest(body []byte, req *gateway.InferRequest, ext *binaryExt) error {
	*req = gateway.InferRequest{}
	s := scanner{b: body, budget: ext.budgetOf()}
	if ext != nil {
		defer func() { ext.held += int64(s.held) }() // taken, given back by the caller, error or not
	}
	if s.peek() != '{' {
		if s.i >= len(s.b) {
			return gateway.BadInput("empty request body: want a JSON object with \"inputs\"")
		}
		return s.errf("want a JSON object")
	}
	s.i++
	sawInputs := false
	var seen keySet
	for first := true; ; first = false {
		ok, err := s.more('}', first)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		k, err := s.key(&seen)
		if err != nil {
			return err
		}
		if s.null() {
			continue // null is absent
		}
		switch string(k) {
		case "id":
			if s.peek() != '"' {
				return s.errf("\"id\" must be a string")
			}
			v, err := s.str()
			if err != nil {
				return err
			}
			if len(v) > MaxNameBytes {
				return gateway.BadInput("\"id\" of %d bytes is over the limit of %d", len(v), MaxNameBytes)
			}
			req.ID = string(v)
		case "inputs":
			sawInputs = true
			if err := decodeInputs(&s, req, ext); err != nil {
				return err
			}
		case "outputs":
			if err := decodeOutputs(&s, req, ext); err != nil {
				return err
			}
		case "parameters":
			if err := decodeRequestParameters(&s, req, ext); err != nil {
				return err
			}
		default:
			if err := s.skip(1); err != nil {
				return err
			}
		}
	}
	if s.peek() != 0 {
		return s.errf("trailing data after the JSON object")
	}
	if !sawInputs || len(req.Inputs) == 0 {
		return gateway.BadInput("missing inputs: the request must have a non-empty \"inputs\" array")
	}
	if ext != nil {
		ext.outNames = req.Outputs
	}
	return nil
}

// decodeRequestParameters reads the request's "parameters" object; of its keys
// the binary extension's "binary_data_output" (a bool) and Triton's schedule
// policy "timeout" (µs) and "priority" (docs/protocol.md) mean something here.
func decodeRequestParameters(s *scanner, req *gateway.InferRequest, ext *binaryExt) error {
	if s.peek() != '{' {
		return s.errf("\"parameters\" must be an object")
	}
	s.i++
	var seen keySet
	for first := true; ; first = false {
		ok, err := s.more('}', first)
		if err != nil || !ok {
			return err
		}
		k, err := s.key(&seen)
		if err != nil {
			return err
		}
		if seen.n > MaxParameters {
			return gateway.BadInput("parameters: more than %d keys", MaxParameters)
		}
		if len(k) > MaxNameBytes {
			return checkParamKey("parameters", string(k))
		}
		if s.null() {
			continue // null is absent
		}
		if string(k) == "binary_data_output" {
			v, err := boolParam(s, "parameters: \"binary_data_output\"")
			if err != nil {
				return err
			}
			if ext != nil {
				ext.allOut = v
			}
			continue
		}
		switch string(k) {
		case "timeout":
			us, err := uintParam(s, "parameters: \"timeout\" (µs)")
			if err != nil {
				return err
			}
			req.Timeout = microseconds(us)
			continue
		case "priority":
			if req.Priority, err = uintParam(s, "parameters: \"priority\" (1 the highest, 0 the default)"); err != nil {
				return err
			}
			continue
		}
		if err := s.skip(2); err != nil {
			return err
		}
	}
}

// uintParam reads a non-negative JSON integer; what names the parameter in
// the error.
func uintParam(s *scanner, what string) (int64, error) {
	var n num
	err := s.number(&n)
	v, ok := n.int64()
	if err != nil || !ok || v < 0 {
		return 0, gateway.BadInput("%s must be a non-negative integer", what)
	}
	return v, nil
}

// boolParam reads a JSON true or false; what names the parameter in the error.
func boolParam(s *scanner, what string) (bool, error) {
	switch {
	case s.literal("true"):
		return true, nil
	case s.literal("false"):
		return false, nil
	}
	return false, gateway.BadInput("%s must be true or false", what)
}

func decodeOutputs(s *scanner, req *gateway.InferRequest, ext *binaryExt) error {
	if err := s.expect('['); err != nil {
		return gateway.BadInput("\"outputs\" must be an array of {\"name\": ...}: %v", err)
	}
	var names nameSet
	for first := true; ; first = false {
		ok, err := s.more(']', first)
		if err != nil || !ok {
			return err
		}
		if len(req.Outputs) == MaxOutputs {
			return gateway.BadInput("outputs: more than %d requested outputs", MaxOutputs)
		}
		if err := s.expect('{'); err != nil {
			return err
		}
		name := ""
		var binary int8 // 0: not said, 1: binary_data true, -1: false
		var seen keySet
		for f := true; ; f = false {
			ok, err := s.more('}', f)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			k, err := s.key(&seen)
			if err != nil {
				return err
			}
			if s.null() {
				continue // null is absent
			}
			switch string(k) {
			case "name":
				v, err := s.str()
				if err != nil {
					return err
				}
				name = string(v)
			case "parameters":
				if binary, err = outputParameters(s, len(req.Outputs)); err != nil {
					return err
				}
			default:
				if err := s.skip(2); err != nil {
					return err
				}
			}
		}
		if name == "" {
			return gateway.BadInput("outputs[%d]: missing \"name\"", len(req.Outputs))
		}
		if err := checkName("outputs", len(req.Outputs), name); err != nil {
			return err
		}
		if !names.add(name) {
			return gateway.BadInput("outputs[%d]: output %q is asked for twice", len(req.Outputs), name)
		}
		if ext != nil && (binary != 0 || ext.outBin != nil) {
			if ext.outBin == nil {
				ext.outBin = make([]int8, len(req.Outputs), len(req.Outputs)+4)
			}
			ext.outBin = append(ext.outBin, binary)
		}
		req.Outputs = append(req.Outputs, name)
	}
}

// outputParameters reads a requested output's "parameters": the binary
// extension's "binary_data" (1 true, -1 false, 0 absent); other keys are skipped.
func outputParameters(s *scanner, idx int) (int8, error) {
	if s.peek() != '{' {
		return 0, s.errf("outputs[%d]: \"parameters\" must be an object", idx)
	}
	s.i++
	var binary int8
	var seen keySet
	for first := true; ; first = false {
		ok, err := s.more('}', first)
		if err != nil || !ok {
			return binary, err
		}
		k, err := s.key(&seen)
		if err != nil {
			return 0, err
		}
		if seen.n > MaxParameters {
			return 0, gateway.BadInput("outputs[%d]: \"parameters\" has more than %d keys", idx, MaxParameters)
		}
		if len(k) > MaxNameBytes {
			return 0, checkParamKey("outputs["+strconv.Itoa(idx)+"]: parameters", string(k))
		}
		if s.null() {
			continue // null is absent
		}
		if string(k) == "binary_data" {
			v, err := boolParam(s, "outputs["+strconv.Itoa(idx)+"]: \"binary_data\"")
			if err != nil {
				return 0, err
			}
			binary = -1
			if v {
				binary = 1
			}
			continue
		}
		if err := s.skip(3); err != nil {
			return 0, err
		}
	}
}

func decodeInputs(s *scanner, req *gateway.InferRequest, ext *binaryExt) error {
	if s.peek() != '[' {
		return s.errf("\"inputs\" must be an array")
	}
	s.i++
	var names nameSet
	for first := true; ; first = false {
		ok, err := s.more(']', first)
		if err != nil || !ok {
			return err
		}
		if len(req.Inputs) == MaxInputs {
			return gateway.BadInput("inputs: more than %d inputs", MaxInputs)
		}
		t, size, err := decodeInput(s, len(req.Inputs), ext != nil && ext.binaryIn)
		if err != nil {
			return err
		}
		if !names.add(t.Name) {
			return gateway.BadInput("inputs[%d]: input %q appears twice", len(req.Inputs), t.Name)
		}
		if size >= 0 || (ext != nil && ext.sizes != nil) {
			if ext.sizes == nil {
				ext.sizes = make([]int64, len(req.Inputs), len(req.Inputs)+4)
				for i := range ext.sizes {
					ext.sizes[i] = -1
				}
			}
			ext.sizes = append(ext.sizes, size)
		}
		req.Inputs = append(req.Inputs, t)
	}
}

// decodeInput reads one input object. When "data" comes before "datatype" or
// "shape" its span is remembered and decoded once the object is read. size is
// the input's binary_data_size, -1 without one; binaryIn says whether the
// binary extension is in use (else binary_data_size is refused).
func decodeInput(s *scanner, idx int, binaryIn bool) (t api.Tensor, size int64, err error) {
	size = -1
	if s.peek() != '{' {
		return t, size, s.errf("inputs[%d] must be an object", idx)
	}
	s.i++
	var dt dtype
	sawShape, sawDatatype := false, false
	dataStart, dataEnd := -1, -1
	decoded := false
	var seen keySet
	for first := true; ; first = false {
		ok, err := s.more('}', first)
		if err != nil {
			return t, size, err
		}
		if !ok {
			break
		}
		k, err := s.key(&seen)
		if err != nil {
			return t, size, err
		}
		if s.null() {
			continue // null is absent
		}
		switch string(k) {
		case "name":
			v, err := s.str()
			if err != nil {
				return t, size, err
			}
			if err := checkName("inputs", idx, string(v)); err != nil {
				return t, size, err
			}
			t.Name = string(v)
		case "datatype":
			if s.peek() != '"' {
				return t, size, gateway.BadInput("inputs[%d]: \"datatype\" must be a string, one of %s", idx, api.Datatypes)
			}
			v, err := s.str()
			if err != nil {
				return t, size, err
			}
			if dt = parseDtype(v); dt == dtInvalid {
				return t, size, gateway.BadInput("inputs[%d]: unknown datatype %q; allowed: %s", idx, v, api.Datatypes)
			}
			sawDatatype = true
			t.Datatype = dtypeNames[dt]
		case "shape":
			if t.Shape, err = decodeShape(s, idx); err != nil {
				return t, size, err
			}
			sawShape = true
		case "parameters":
			if size, err = inputParameters(s, idx); err != nil {
				return t, size, err
			}
		case "data":
			if sawShape && sawDatatype {
				if err := decodeData(s, &t, dt); err != nil {
					return t, size, err
				}
				decoded = true
			} else {
				dataStart = s.i
				if err := s.skip(2); err != nil {
					return t, size, err
				}
				dataEnd = s.i
			}
		default:
			if err := s.skip(2); err != nil {
				return t, size, err
			}
		}
	}
	name := t.Name
	hasData := decoded || dataStart >= 0
	switch {
	case name == "":
		return t, size, gateway.BadInput("inputs[%d]: missing \"name\"", idx)
	case !sawDatatype:
		return t, size, gateway.BadInput("input %q: missing \"datatype\"; allowed: %s", name, api.Datatypes)
	case !sawShape:
		return t, size, gateway.BadInput("input %q: missing \"shape\"", name)
	case size >= 0 && hasData:
		return t, size, gateway.BadInput("input %q: has both \"data\" and \"parameters\": {\"binary_data_size\": %d}; give its data one way: JSON \"data\", or binary after the JSON header", name, size)
	case size >= 0 && !binaryIn:
		return t, size, gateway.BadInput("input %q: \"binary_data_size\" (the binary tensor data extension) needs the request header %s: the JSON header's length in bytes; or send \"data\" as JSON", name, HeaderContentLength)
	case size >= 0:
		return t, size, nil // its data follows the JSON header
	case !hasData:
		return t, size, gateway.BadInput("input %q: missing \"data\": give it as JSON \"data\" or, with the binary tensor data extension, \"parameters\": {\"binary_data_size\": N}", name)
	}
	if !decoded {
		sub := scanner{b: s.b[:dataEnd], i: dataStart, budget: s.budget}
		err := decodeData(&sub, &t, dt)
		s.held += sub.held
		if err != nil {
			return t, size, err
		}
	}
	return t, size, nil
}

func decodeShape(s *scanner, idx int) ([]int64, error) {
	if s.peek() != '[' {
		return nil, gateway.BadInput("inputs[%d]: \"shape\" must be an array of non-negative integers", idx)
	}
	s.i++
	shape := make([]int64, 0, 4)
	for first := true; ; first = false {
		ok, err := s.more(']', first)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		var n num
		if err := s.number(&n); err != nil {
			return nil, gateway.BadInput("inputs[%d]: \"shape\" must be an array of non-negative integers: %v", idx, err)
		}
		v, ok := n.int64()
		if !ok || v < 0 {
			return nil, gateway.BadInput("inputs[%d]: shape dimension %s is not a non-negative integer", idx, n.lit)
		}
		if len(shape) >= maxDepth {
			return nil, gateway.BadInput("inputs[%d]: shape has more than %d dimensions", idx, maxDepth)
		}
		shape = append(shape, v)
	}
	if _, err := api.NumElements(shape); err != nil {
		return nil, gateway.BadInput("inputs[%d]: %v", idx, err)
	}
	return shape, nil
}

// inputParameters reads an input's parameters and returns its
// binary_data_size, -1 when it has none. Other keys are skipped.
func inputParameters(s *scanner, idx int) (int64, error) {
	if s.peek() != '{' {
		return -1, s.errf("inputs[%d]: \"parameters\" must be an object", idx)
	}
	s.i++
	size := int64(-1)
	var seen keySet
	for first := true; ; first = false {
		ok, err := s.more('}', first)
		if err != nil || !ok {
			return size, err
		}
		k, err := s.key(&seen)
		if err != nil {
			return -1, err
		}
		if seen.n > MaxParameters {
			return -1, gateway.BadInput("inputs[%d]: \"parameters\" has more than %d keys", idx, MaxParameters)
		}
		if len(k) > MaxNameBytes {
			return -1, checkParamKey("inputs["+strconv.Itoa(idx)+"]: parameters", string(k))
		}
		if s.null() {
			continue // null is absent
		}
		if string(k) != "binary_data_size" {
			if err := s.skip(3); err != nil {
				return -1, err
			}
			continue
		}
		var n num
		err = s.number(&n)
		v, ok := n.int64()
		if err != nil || !ok || v < 0 {
			return -1, gateway.BadInput("inputs[%d]: \"binary_data_size\" must be a non-negative integer (bytes)", idx)
		}
		size = v
	}
}

func intRange(dt dtype) (lo, hi int64) {
	switch dt {
	case dtInt8:
		return math.MinInt8, math.MaxInt8
	case dtInt16:
		return math.MinInt16, math.MaxInt16
	case dtInt32:
		return math.MinInt32, math.MaxInt32
	case dtInt64:
		return math.MinInt64, math.MaxInt64
	case dtUint8:
		return 0, math.MaxUint8
	case dtUint16:
		return 0, math.MaxUint16
	case dtUint32:
		return 0, math.MaxUint32
	}
	return 0, 0
}

// parseInt parses a JSON integer literal; ok is false on overflow of int64.
func parseInt(lit []byte) (int64, bool) {
	neg := len(lit) > 0 && lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	if len(lit) == 0 {
		return 0, false
	}
	var u uint64
	for _, c := range lit {
		if c < '0' || c > '9' {
			return 0, false
		}
		if u > (math.MaxUint64-9)/10 {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// AppendInferResponse appends r as KServe v2 response JSON to dst. Outputs are
// validated first (a backend may answer garbage), in which case dst is returned
// unchanged with an error matching ErrBackend. Floating-point NaN and ±Inf, which
// JSON cannot express, are written as null.
func AppendInferResponse(dst []byte, r *gateway.InferResponse) ([]byte, error) {
	return appendResponse(dst, r, nil)
}

// appendResponse writes the response JSON; the outputs ext asks for in binary
// (none when ext is nil) get binary_data_size instead of data.
func appendResponse(dst []byte, r *gateway.InferResponse, ext *binaryExt) ([]byte, error) {
	for i := range r.Outputs {
		if err := r.Outputs[i].Validate(); err != nil {
			return dst, gateway.WrapBackend("output", err)
		}
		if dtypeOf(r.Outputs[i].Datatype) == dtInvalid {
			return dst, gateway.WrapBackend("output", errorString("unknown datatype "+strconv.Quote(r.Outputs[i].Datatype)))
		}
	}
	dst = append(dst, `{"model_name":`...)
	dst = appendString(dst, r.ModelName)
	if r.ID != "" {
		dst = append(dst, `,"id":`...)
		dst = appendString(dst, r.ID)
	}
	if len(r.Parameters) > 0 {
		dst = append(dst, `,"parameters":{`...)
		for i, p := range r.Parameters {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, p.Key)
			dst = append(dst, ':')
			dst = appendFloat(dst, p.Value, 64)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `,"outputs":[`...)
	for i := range r.Outputs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendTensor(dst, &r.Outputs[i], ext.binaryOutput(r.Outputs[i].Name))
	}
	return append(dst, "]}"...), nil
}

// appendTensor writes one output; asBinary writes its binary_data_size in place
// of its data, which the caller appends after the JSON.
func appendTensor(dst []byte, t *api.Tensor, asBinary bool) []byte {
	dst = append(dst, `{"name":`...)
	dst = appendString(dst, t.Name)
	dst = append(dst, `,"datatype":"`...)
	dst = append(dst, t.Datatype...)
	dst = append(dst, `","shape":[`...)
	for i, d := range t.Shape {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, d, 10)
	}
	if asBinary {
		return appendBinaryMeta(dst, t)
	}
	dst = append(dst, `],"data":[`...)
	b := t.Data
	le := binary.LittleEndian
	dt := dtypeOf(t.Datatype)
	first := true
	for len(b) > 0 {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		switch dt {
		case dtBool:
			if b[0] != 0 {
				dst = append(dst, "true"...)
			} else {
				dst = append(dst, "false"...)
			}
			b = b[1:]
		case dtUint8:
			dst = strconv.AppendUint(dst, uint64(b[0]), 10)
			b = b[1:]
		case dtInt8:
			dst = strconv.AppendInt(dst, int64(int8(b[0])), 10)
			b = b[1:]
		case dtUint16:
			dst = strconv.AppendUint(dst, uint64(le.Uint16(b)), 10)
			b = b[2:]
		case dtInt16:
			dst = strconv.AppendInt(dst, int64(int16(le.Uint16(b))), 10)
			b = b[2:]
		case dtUint32:
			dst = strconv.AppendUint(dst, uint64(le.Uint32(b)), 10)
			b = b[4:]
		case dtInt32:
			dst = strconv.AppendInt(dst, int64(int32(le.Uint32(b))), 10)
			b = b[4:]
		case dtUint64:
			dst = strconv.AppendUint(dst, le.Uint64(b), 10)
			b = b[8:]
		case dtInt64:
			dst = strconv.AppendInt(dst, int64(le.Uint64(b)), 10)
			b = b[8:]
		case dtFP16:
			dst = appendFloat(dst, float64(api.Float16Value(le.Uint16(b))), 32)
			b = b[2:]
		case dtBF16:
			dst = appendFloat(dst, float64(api.BFloat16Value(le.Uint16(b))), 32)
			b = b[2:]
		case dtFP32:
			dst = appendFloat(dst, float64(math.Float32frombits(le.Uint32(b))), 32)
			b = b[4:]
		case dtFP64:
			dst = appendFloat(dst, math.Float64frombits(le.Uint64(b)), 64)
			b = b[8:]
		case dtBytes:
			n := le.Uint32(b)
			dst = appendString(dst, b[4:4+n])
			b = b[4+n:]
		}
	}
	return append(dst, "]}"...)
}

func appendFloat(dst []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bits)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendString[S string | []byte](dst []byte, s S) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		n := runeLen(s, i)
		if n == 0 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += n
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// runeLen returns the length of the valid UTF-8 sequence at s[i], 0 if invalid
// (the table of RFC 3629 §4: no overlongs, no surrogates, nothing above U+10FFFF).
func runeLen[S string | []byte](s S, i int) int {
	c := s[i]
	lo, hi := byte(0x80), byte(0xbf)
	var n int
	switch {
	case 0xc2 <= c && c <= 0xdf:
		n = 2
	case c == 0xe0:
		n, lo = 3, 0xa0
	case c == 0xed:
		n, hi = 3, 0x9f
	case 0xe1 <= c && c <= 0xef:
		n = 3
	case c == 0xf0:
		n, lo = 4, 0x90
	case c == 0xf4:
		n, hi = 4, 0x8f
	case 0xf1 <= c && c <= 0xf3:
		n = 4
	default:
		return 0
	}
	if i+n > len(s) || s[i+1] < lo || s[i+1] > hi {
		return 0
	}
	for j := 2; j < n; j++ {
		if s[i+j] < 0x80 || s[i+j] > 0xbf {
			return 0
		}
	}
	return n
}

type errorString string

func (e errorString) Error() string { return string(e) }
