package loadgen

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/piccolo-serving/piccolo/api"
)

// ErrBadInput marks an input file or metadata that cannot become a request.
var ErrBadInput = errors.New("bad input")

// Payload is one request body, prepared once and reused by every request that
// cycles onto it (request k uses payload k mod len). It is immutable after
// construction and shared by all sending goroutines.
type Payload struct {
	// Source names where the payload came from, for reports: a file name,
	// "model metadata" or "fallback".
	Source string
	// Tensors are the inputs as raw little-endian bytes, for gRPC raw_input_contents.
	Tensors []api.Tensor

	// jsonRest is the HTTP JSON request object without its "id" member and its
	// opening brace: `"inputs":[...]}`. The sender writes `{"id":"<k>",` before it.
	jsonRest []byte
	// binary is the tail of Triton's binary-data extension (BYTES images); nil when
	// the JSON carries every element.
	binary []byte
}

// imageExts are the file name extensions LoadInputs sends as images.
var imageExts = []string{".png", ".jpg", ".jpeg"}

// LoadInputs reads the payloads named by paths, in order. A path is one of:
//   - a .json file: a KServe v2 inference request body ({"inputs":[{"name",
//     "shape","datatype","data"}], optional "parameters" and "outputs"); its "id",
//     if any, is replaced per request;
//   - a .png/.jpg/.jpeg file: a BYTES tensor named imageInput of shape [1] holding
//     the file's bytes;
//   - a directory: every .json, .png, .jpg and .jpeg file in it, by name.
//
// Errors wrap ErrBadInput and name the file and what is wrong.
func LoadInputs(paths []string, imageInput string) ([]Payload, error) {
	var out []Payload
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w: %w", p, ErrBadInput, err)
		}
		files := []string{p}
		if st.IsDir() {
			entries, err := os.ReadDir(p)
			if err != nil {
				return nil, fmt.Errorf("input directory %q: %w: %w", p, ErrBadInput, err)
			}
			files = files[:0]
			for _, e := range entries {
				ext := strings.ToLower(filepath.Ext(e.Name()))
				if !e.IsDir() && (ext == ".json" || slices.Contains(imageExts, ext)) {
					files = append(files, filepath.Join(p, e.Name()))
				}
			}
			if len(files) == 0 {
				return nil, fmt.Errorf("input directory %q: %w: no .json, .png or .jpg files in it", p, ErrBadInput)
			}
		}
		for _, f := range files {
			pl, err := loadFile(f, imageInput)
			if err != nil {
				return nil, err
			}
			out = append(out, pl)
		}
	}
	return out, nil
}

func loadFile(path, imageInput string) (Payload, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Payload{}, fmt.Errorf("input %q: %w: %w", path, ErrBadInput, err)
	}
	ext := strings.ToLower(filepath.Ext(path))
	switch {
	case ext == ".json":
		pl, err := ParseRequest(data)
		if err != nil {
			return Payload{}, fmt.Errorf("input %q: %w", path, err)
		}
		pl.Source = path
		return pl, nil
	case slices.Contains(imageExts, ext):
		pl, err := ImagePayload(imageInput, data)
		if err != nil {
			return Payload{}, fmt.Errorf("input %q: %w", path, err)
		}
		pl.Source = path
		return pl, nil
	}
	return Payload{}, fmt.Errorf("input %q: %w: unknown file type %q; allowed: .json (KServe v2 request body), .png, .jpg, .jpeg, or a directory of them", path, ErrBadInput, ext)
}

// jsonTensor is one input of a KServe v2 JSON request.
type jsonTensor struct {
	Name       string          `json:"name"`
	Shape      []int64         `json:"shape"`
	Datatype   string          `json:"datatype"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
	Data       json.RawMessage `json:"data"`
}

// ParseRequest checks a KServe v2 JSON inference request body and prepares it for
// both protocols: every input must name a known datatype and a shape, and its
// "data" (flat or nested, row-major) must hold exactly the elements the shape
// promises. Errors wrap ErrBadInput and name the input and what is wrong.
func ParseRequest(body []byte) (Payload, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return Payload{}, fmt.Errorf("%w: not a JSON object: %w", ErrBadInput, err)
	}
	rawInputs, ok := obj["inputs"]
	if !ok {
		return Payload{}, fmt.Errorf(`%w: no "inputs"; a KServe v2 request is {"inputs":[{"name","shape","datatype","data"}]}`, ErrBadInput)
	}
	var inputs []jsonTensor
	if err := json.Unmarshal(rawInputs, &inputs); err != nil {
		return Payload{}, fmt.Errorf(`%w: "inputs": %w`, ErrBadInput, err)
	}
	if len(inputs) == 0 {
		return Payload{}, fmt.Errorf(`%w: "inputs" is empty`, ErrBadInput)
	}
	var pl Payload
	for i, in := range inputs {
		if in.Name == "" {
			return Payload{}, fmt.Errorf(`%w: input %d has no "name"`, ErrBadInput, i)
		}
		if bytes.Contains(in.Parameters, []byte("binary_data_size")) {
			return Payload{}, fmt.Errorf("%w: input %q uses the binary-data extension; give the data in JSON, or the image file itself", ErrBadInput, in.Name)
		}
		t, err := tensorFromJSON(in)
		if err != nil {
			return Payload{}, fmt.Errorf("%w: input %q: %w", ErrBadInput, in.Name, err)
		}
		pl.Tensors = append(pl.Tensors, t)
	}
	delete(obj, "id")
	rest, err := json.Marshal(obj)
	if err != nil {
		return Payload{}, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	pl.jsonRest = rest[1:] // drop '{'; obj holds at least "inputs", so a ',' may follow the id
	return pl, nil
}

// tensorFromJSON converts one JSON input to raw little-endian bytes.
func tensorFromJSON(in jsonTensor) (api.Tensor, error) {
	size := api.ElementSize(in.Datatype)
	if size < 0 {
		return api.Tensor{}, fmt.Errorf("unknown datatype %q; allowed: %s", in.Datatype, api.Datatypes)
	}
	if in.Shape == nil {
		return api.Tensor{}, fmt.Errorf(`no "shape"`)
	}
	n, err := api.NumElements(in.Shape)
	if err != nil {
		return api.Tensor{}, err
	}
	if len(in.Data) == 0 {
		return api.Tensor{}, fmt.Errorf(`no "data"`)
	}
	dec := json.NewDecoder(bytes.NewReader(in.Data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return api.Tensor{}, fmt.Errorf(`"data": %w`, err)
	}
	var flat []any
	flatten(v, &flat)
	if int64(len(flat)) != n {
		return api.Tensor{}, fmt.Errorf(`shape %v needs %d elements, "data" has %d`, in.Shape, n, len(flat))
	}
	t := api.Tensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape}
	if size > 0 {
		t.Data = make([]byte, 0, int(n)*size)
	}
	for i, e := range flat {
		t.Data, err = appendElement(t.Data, in.Datatype, e)
		if err != nil {
			return api.Tensor{}, fmt.Errorf(`"data" element %d: %w`, i, err)
		}
	}
	return t, nil
}

func flatten(v any, out *[]any) {
	if list, ok := v.([]any); ok {
		for _, e := range list {
			flatten(e, out)
		}
		return
	}
	*out = append(*out, v)
}

// appendElement appends one JSON element as datatype's little-endian bytes.
func appendElement(b []byte, datatype string, e any) ([]byte, error) {
	le := binary.LittleEndian
	switch datatype {
	case "BOOL":
		v, ok := e.(bool)
		if !ok {
			return b, fmt.Errorf("%v is not a JSON boolean", e)
		}
		if v {
			return append(b, 1), nil
		}
		return append(b, 0), nil
	case "BYTES":
		s, ok := e.(string)
		if !ok {
			return b, fmt.Errorf("%v is not a JSON string", e)
		}
		b = le.AppendUint32(b, uint32(len(s)))
		return append(b, s...), nil
	}
	num, ok := e.(json.Number)
	if !ok {
		return b, fmt.Errorf("%v is not a JSON number", e)
	}
	switch datatype {
	case "FP32", "FP64", "FP16", "BF16":
		f, err := strconv.ParseFloat(num.String(), 64)
		if err != nil {
			return b, err
		}
		switch datatype {
		case "FP64":
			return le.AppendUint64(b, math.Float64bits(f)), nil
		case "FP32":
			return le.AppendUint32(b, math.Float32bits(float32(f))), nil
		case "BF16":
			return le.AppendUint16(b, api.BFloat16Bits(f)), nil
		default:
			return le.AppendUint16(b, api.Float16Bits(f)), nil
		}
	}
	bits := 8 * api.ElementSize(datatype)
	var u uint64
	if datatype[0] == 'U' {
		v, err := strconv.ParseUint(num.String(), 10, bits)
		if err != nil {
			return b, fmt.Errorf("%s: %w", datatype, err)
		}
		u = v
	} else {
		v, err := strconv.ParseInt(num.String(), 10, bits)
		if err != nil {
			return b, fmt.Errorf("%s: %w", datatype, err)
		}
		u = uint64(v)
	}
	for i := 0; i < bits/8; i++ {
		b = append(b, byte(u>>(8*i)))
	}
	return b, nil
}

// ImagePayload returns a payload that sends data (an encoded image) as a BYTES
// tensor named name of shape [1]. Over HTTP it travels with Triton's binary-data
// extension (the JSON header gives "binary_data_size" and the request carries the
// Inference-Header-Content-Length header), since JSON strings cannot hold arbitrary
// bytes.
func ImagePayload(name string, data []byte) (Payload, error) {
	if name == "" {
		return Payload{}, fmt.Errorf("%w: image input name is empty", ErrBadInput)
	}
	if len(data) == 0 {
		return Payload{}, fmt.Errorf("%w: image file is empty", ErrBadInput)
	}
	raw := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(data)), uint32(len(data)))
	raw = append(raw, data...)
	nameJSON, _ := json.Marshal(name)
	rest := fmt.Sprintf(`"inputs":[{"name":%s,"shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":%d}}]}`, nameJSON, len(raw))
	return Payload{
		Tensors:  []api.Tensor{{Name: name, Datatype: "BYTES", Shape: []int64{1}, Data: raw}},
		jsonRest: []byte(rest),
		binary:   raw,
	}, nil
}

// TensorSpec is one declared input of a model's metadata; -1 marks a variable
// dimension.
type TensorSpec struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// ZeroPayload returns a payload of zero-filled inputs of the declared specs, with
// dimension 0 set to 1 (one request is one item) and every -1 dimension set to 1.
// BYTES elements are empty strings. Errors wrap ErrBadInput.
func ZeroPayload(specs []TensorSpec) (Payload, error) {
	if len(specs) == 0 {
		return Payload{}, fmt.Errorf("%w: the model declares no inputs", ErrBadInput)
	}
	var js bytes.Buffer
	js.WriteString(`"inputs":[`)
	var pl Payload
	for i, s := range specs {
		t, err := api.ZeroTensor(s.Name, s.Datatype, s.Shape, 1, 1<<26)
		if err != nil {
			return Payload{}, fmt.Errorf("%w: %w; give an input file instead", ErrBadInput, err)
		}
		n, _ := api.NumElements(t.Shape) // ZeroTensor checked it
		zero := "0"
		switch s.Datatype {
		case "BOOL":
			zero = "false"
		case "BYTES":
			zero = `""`
		}
		pl.Tensors = append(pl.Tensors, t)
		if i > 0 {
			js.WriteByte(',')
		}
		head, _ := json.Marshal(struct {
			Name     string  `json:"name"`
			Shape    []int64 `json:"shape"`
			Datatype string  `json:"datatype"`
		}{s.Name, t.Shape, s.Datatype})
		js.Write(head[:len(head)-1])
		js.WriteString(`,"data":[`)
		for k := int64(0); k < n; k++ {
			if k > 0 {
				js.WriteByte(',')
			}
			js.WriteString(zero)
		}
		js.WriteString("]}")
	}
	js.WriteString("]}")
	pl.jsonRest = js.Bytes()
	pl.Source = "model metadata"
	return pl, nil
}

// fallbackPayload is sent when there is no input file and no model metadata: one
// FP32 [1,1] tensor named "input0".
func fallbackPayload() Payload {
	pl, _ := ZeroPayload([]TensorSpec{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 1}}})
	pl.Source = "fallback FP32 [1,1] input0"
	return pl
}
