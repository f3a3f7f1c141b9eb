package kserve

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
	"github.com/piccolo-serving/piccolo/internal/testharness"
)

func TestDecodeInferRequest(t *testing.T) {
	tests := []struct {
		name string
		body string
		want gateway.InferRequest
	}{
		{
			name: "flat FP32 with id and outputs",
			body: `{"id":"r1","inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2.5,-3,4e2]}],"outputs":[{"name":"y"}]}`,
			want: gateway.InferRequest{ID: "r1", Inputs: []api.Tensor{{Name: "x", Datatype: "FP32", Shape: []int64{2, 2}, Data: gatewaytest.FP32(1, 2.5, -3, 400)}}, Outputs: []string{"y"}},
		},
		{
			name: "nested data, data before shape and datatype, parameters ignored",
			body: `{"parameters":{"a":1},"inputs":[{"data":[[1,2],[3,4]],"name":"x","parameters":{"content_type":"x"},"shape":[2,2],"datatype":"INT32"}]}`,
			want: gateway.InferRequest{Inputs: []api.Tensor{{Name: "x", Datatype: "INT32", Shape: []int64{2, 2}, Data: gatewaytest.LE32(1, 2, 3, 4)}}},
		},
		{
			name: "BYTES with escapes and unicode",
			body: `{"inputs":[{"name":"s","shape":[2],"datatype":"BYTES","data":["a\"b\n","\u00e9\ud83d\ude00"]}]}`,
			want: gateway.InferRequest{Inputs: []api.Tensor{{Name: "s", Datatype: "BYTES", Shape: []int64{2}, Data: gatewaytest.BytesElems("a\"b\n", "é😀")}}},
		},
		{
			name: "BOOL, INT8 and UINT64 extremes",
			body: `{"inputs":[{"name":"b","shape":[2],"datatype":"BOOL","data":[true,false]},{"name":"i","shape":[2],"datatype":"INT8","data":[-128,127]},{"name":"u","shape":[1],"datatype":"UINT64","data":[18446744073709551615]}]}`,
			want: gateway.InferRequest{Inputs: []api.Tensor{
				{Name: "b", Datatype: "BOOL", Shape: []int64{2}, Data: []byte{1, 0}},
				{Name: "i", Datatype: "INT8", Shape: []int64{2}, Data: []byte{0x80, 0x7f}},
				{Name: "u", Datatype: "UINT64", Shape: []int64{1}, Data: []byte{255, 255, 255, 255, 255, 255, 255, 255}},
			}},
		},
		{
			name: "FP16 and BF16",
			body: `{"inputs":[{"name":"h","shape":[3],"datatype":"FP16","data":[1,-2,65504]},{"name":"bf","shape":[1],"datatype":"BF16","data":[1.5]}]}`,
			want: gateway.InferRequest{Inputs: []api.Tensor{
				{Name: "h", Datatype: "FP16", Shape: []int64{3}, Data: []byte{0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b}},
				{Name: "bf", Datatype: "BF16", Shape: []int64{1}, Data: []byte{0xc0, 0x3f}},
			}},
		},
		{
			name: "null optional fields are absent",
			body: `{"id":null,"parameters":null,"outputs":null,"inputs":[{"name":"x","parameters":null,"shape":[1],"datatype":"INT32","data":[7]}]}`,
			want: gateway.InferRequest{Inputs: []api.Tensor{{Name: "x", Datatype: "INT32", Shape: []int64{1}, Data: gatewaytest.LE32(7)}}},
		},
		{
			name: "null output parameters and binary_data_output",
			body: `{"parameters":{"binary_data_output":null},"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[7]}],"outputs":[{"name":"y","parameters":null}]}`,
			want: gateway.InferRequest{Inputs: []api.Tensor{{Name: "x", Datatype: "INT32", Shape: []int64{1}, Data: gatewaytest.LE32(7)}}, Outputs: []string{"y"}},
		},
		{
			name: "-0 keeps its sign in floats, is 0 in integers",
			body: `{"inputs":[{"name":"f","shape":[2],"datatype":"FP32","data":[-0,-0.0]},{"name":"d","shape":[1],"datatype":"FP64","data":[-0]},{"name":"i","shape":[1],"datatype":"INT8","data":[-0]},{"name":"u","shape":[1],"datatype":"UINT64","data":[-0]}]}`,
			want: gateway.InferRequest{Inputs: []api.Tensor{
				{Name: "f", Datatype: "FP32", Shape: []int64{2}, Data: []byte{0, 0, 0, 0x80, 0, 0, 0, 0x80}},
				{Name: "d", Datatype: "FP64", Shape: []int64{1}, Data: []byte{0, 0, 0, 0, 0, 0, 0, 0x80}},
				{Name: "i", Datatype: "INT8", Shape: []int64{1}, Data: []byte{0}},
				{Name: "u", Datatype: "UINT64", Shape: []int64{1}, Data: make([]byte, 8)},
			}},
		},
		{
			// 1 + 2^-24 is the midpoint between float32 1 and its successor; a
			// decimal a hair above it rounds up. Through float64 it first rounds
			// to the midpoint itself, then (ties to even) down to 1.
			name: "FP32 rounded once",
			body: `{"inputs":[{"name":"f","shape":[1],"datatype":"FP32","data":[1.00000005960464477539062500000001]}]}`,
			want: gateway.InferRequest{Inputs: []api.Tensor{{Name: "f", Datatype: "FP32", Shape: []int64{1}, Data: gatewaytest.FP32(math.Nextafter32(1, 2))}}},
		},
		{
			name: "nested exactly as a 3-d shape",
			body: `{"inputs":[{"name":"x","shape":[2,1,2],"datatype":"INT16","data":[[[1,2]],[[3,4]]]}]}`,
			want: gateway.InferRequest{Inputs: []api.Tensor{{Name: "x", Datatype: "INT16", Shape: []int64{2, 1, 2}, Data: []byte{1, 0, 2, 0, 3, 0, 4, 0}}}},
		},
		{
			name: "empty tensor",
			body: ` { "inputs" : [ { "name" : "e" , "shape" : [0,3] , "datatype" : "FP64" , "data" : [ ] } ] } `,
			want: gateway.InferRequest{Inputs: []api.Tensor{{Name: "e", Datatype: "FP64", Shape: []int64{0, 3}, Data: []byte{}}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got gateway.InferRequest
			if err := DecodeInferRequest([]byte(tc.body), &got); err != nil {
				t.Fatalf("DecodeInferRequest: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("request mismatch (-want +got):\n%s", diff)
			}
			for _, in := range got.Inputs {
				if err := in.Validate(); err != nil {
					t.Errorf("decoded tensor does not validate: %v", err)
				}
			}
		})
	}
}

func TestDecodeInferRequestErrors(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"empty body", ``, "empty request body"},
		{"not an object", `[1]`, "want a JSON object"},
		{"garbage", `{"inputs":[{"name":`, "malformed JSON at byte 19"},
		{"trailing", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]} x`, "trailing data"},
		{"no inputs", `{"id":"a"}`, "missing inputs"},
		{"empty inputs", `{"inputs":[]}`, "missing inputs"},
		{"unknown datatype", `{"inputs":[{"name":"x","shape":[1],"datatype":"FLOAT","data":[1]}]}`, `unknown datatype "FLOAT"; allowed: BOOL`},
		{"missing name", `{"inputs":[{"shape":[1],"datatype":"FP32","data":[1]}]}`, `inputs[0]: missing "name"`},
		{"missing datatype", `{"inputs":[{"name":"x","shape":[1],"data":[1]}]}`, `input "x": missing "datatype"`},
		{"missing shape", `{"inputs":[{"name":"x","datatype":"FP32","data":[1]}]}`, `input "x": missing "shape"`},
		{"missing data", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32"}]}`, `input "x": missing "data"`},
		{"binary extension", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}`, "binary tensor data extension"},
		{"count mismatch", `{"inputs":[{"name":"x","shape":[2,3],"datatype":"FP32","data":[1,2,3,4,5]}]}`, `input "x": shape [2 3] needs 6 elements, data has 5`},
		{"too many", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1,2]}]}`, `shape [1] needs 1 elements, data has more`},
		{"nested for a 1-d shape", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[[1],[2]]}]}`, `ragged data: data[0] is an array among scalars`},
		// Strict input (issue 23): each of these was accepted, or refused for the wrong reason, before.
		{"duplicate inputs", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}],"inputs":[{"name":"y","shape":[1],"datatype":"FP32","data":[1]}]}`, `duplicate key "inputs"`},
		{"shape after data", `{"inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[1,2],"shape":[1,3]}]}`, `duplicate key "shape"`},
		{"duplicate id", `{"id":"a","id":"b","inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`, `duplicate key "id"`},
		{"duplicate escaped key", `{"inputs":[{"name":"x","name":"y","shape":[1],"datatype":"FP32","data":[1]}]}`, `duplicate key "name"`},
		{"duplicate in parameters", `{"parameters":{"a":1,"a":2},"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`, `duplicate key "a"`},
		{"duplicate in a skipped object", `{"extra":{"k":{"z":1,"z":1}},"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`, `duplicate key "z"`},
		{"duplicate in output", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}],"outputs":[{"name":"y","name":"z"}]}`, `duplicate key "name"`},
		{"ragged rows", `{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2,3],[4]]}]}`, `ragged data: data[0] has more than 2 elements; shape [2 2] wants 2 at depth 2`},
		{"ragged short row", `{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[4]]}]}`, `ragged data: data[1] has 1 elements; shape [2 2] wants 2 at depth 2`},
		{"too few rows", `{"inputs":[{"name":"x","shape":[3,1],"datatype":"FP32","data":[[1],[2]]}]}`, `ragged data: data has 2 elements; shape [3 1] wants 3 at depth 1`},
		{"nested too deep", `{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[[1,2]],[[3,4]]]}]}`, `ragged data: data[0][0] is an array; shape [2 2] has scalars at depth 2`},
		{"scalar beside arrays", `{"inputs":[{"name":"x","shape":[2,1],"datatype":"FP32","data":[[1],2]}]}`, `ragged data: data[1] is not an array`},
		{"array among flat scalars", `{"inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","data":[1,[2]]}]}`, `ragged data: data[1] is an array among scalars`},
		{"null inputs", `{"inputs":null}`, `missing inputs`},
		{"null name", `{"inputs":[{"name":null,"shape":[1],"datatype":"FP32","data":[1]}]}`, `inputs[0]: missing "name"`},
		{"null element", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[null]}]}`, `want a number for FP32`},
		{"uint64 over", `{"inputs":[{"name":"x","shape":[1],"datatype":"UINT64","data":[18446744073709551616]}]}`, `out of range for UINT64`},
		{"uint8 out of range", `{"inputs":[{"name":"x","shape":[2],"datatype":"UINT8","data":[1,256]}]}`, `input "x": data element 1: 256 is out of range for UINT8 (0..255)`},
		{"int32 out of range", `{"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[-2147483649]}]}`, `out of range for INT32`},
		{"int64 overflow", `{"inputs":[{"name":"x","shape":[1],"datatype":"INT64","data":[9223372036854775808]}]}`, `out of range for INT64`},
		{"uint64 negative", `{"inputs":[{"name":"x","shape":[1],"datatype":"UINT64","data":[-1]}]}`, `out of range for UINT64`},
		{"fraction in int", `{"inputs":[{"name":"x","shape":[1],"datatype":"INT16","data":[1.5]}]}`, `1.5 is not an integer`},
		{"fp32 out of range", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1e39]}]}`, `out of range for FP32`},
		{"fp16 out of range", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP16","data":[70000]}]}`, `out of range for FP16`},
		{"string for number", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":["1"]}]}`, `want a number for FP32`},
		{"number for bytes", `{"inputs":[{"name":"x","shape":[1],"datatype":"BYTES","data":[1]}]}`, `want a string for BYTES`},
		{"number for bool", `{"inputs":[{"name":"x","shape":[1],"datatype":"BOOL","data":[1]}]}`, `want true or false for BOOL`},
		{"negative dim", `{"inputs":[{"name":"x","shape":[-1],"datatype":"FP32","data":[]}]}`, `shape dimension -1 is not a non-negative integer`},
		{"huge shape", `{"inputs":[{"name":"x","shape":[1000000000],"datatype":"FP32","data":[1]}]}`, `more than the request body holds`},
		{"duplicate input", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]},{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`, `input "x" appears twice`},
		{"data not array", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":1}]}`, `"data" must be an array`},
		{"bad escape", `{"inputs":[{"name":"\q"}]}`, `bad escape`},
		{"leading zero", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[01]}]}`, `malformed JSON`},
		{"deep nesting", `{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, `nested deeper than 64`},
		{"output without name", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}],"outputs":[{}]}`, `outputs[0]: missing "name"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var req gateway.InferRequest
			err := DecodeInferRequest([]byte(tc.body), &req)
			if err == nil {
				t.Fatalf("DecodeInferRequest(%s) succeeded, want error containing %q", tc.body, tc.want)
			}
			if !errors.Is(err, gateway.ErrBadInput) {
				t.Errorf("error %q does not match ErrBadInput", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestAppendInferResponse(t *testing.T) {
	resp := gateway.InferResponse{
		ModelName:  "traffic",
		ID:         "r\"1",
		Parameters: []gateway.Param{{Key: "piccolo.e2e_ms", Value: 12.5}},
		Outputs: []api.Tensor{
			{Name: "y", Datatype: "FP32", Shape: []int64{1, 3}, Data: gatewaytest.FP32(1, -0.5, float32(math.NaN()))},
			{Name: "s", Datatype: "BYTES", Shape: []int64{2}, Data: gatewaytest.BytesElems("hi\n", "\xff")},
			{Name: "h", Datatype: "FP16", Shape: []int64{1}, Data: []byte{0x00, 0x3c}},
			{Name: "i", Datatype: "INT64", Shape: []int64{1}, Data: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		},
	}
	got, err := AppendInferResponse(nil, &resp)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model_name":"traffic","id":"r\"1","parameters":{"piccolo.e2e_ms":12.5},"outputs":[` +
		`{"name":"y","datatype":"FP32","shape":[1,3],"data":[1,-0.5,null]},` +
		`{"name":"s","datatype":"BYTES","shape":[2],"data":["hi\n","\ufffd"]},` +
		`{"name":"h","datatype":"FP16","shape":[1],"data":[1]},` +
		`{"name":"i","datatype":"INT64","shape":[1],"data":[-1]}]}`
	if string(got) != want {
		t.Errorf("AppendInferResponse:\n got %s\nwant %s", got, want)
	}
	if !json.Valid(got) {
		t.Errorf("not valid JSON: %s", got)
	}

	bad := gateway.InferResponse{Outputs: []api.Tensor{{Name: "y", Datatype: "FP32", Shape: []int64{2}, Data: gatewaytest.FP32(1)}}}
	if _, err := AppendInferResponse(nil, &bad); !errors.Is(err, gateway.ErrBackend) {
		t.Errorf("truncated output: got %v, want ErrBackend", err)
	}
}

// TestRoundTrip decodes what the encoder writes for every datatype.
func TestRoundTrip(t *testing.T) {
	body := `{"inputs":[` +
		`{"name":"a","shape":[2],"datatype":"UINT16","data":[0,65535]},` +
		`{"name":"b","shape":[2],"datatype":"INT16","data":[-32768,32767]},` +
		`{"name":"c","shape":[2],"datatype":"UINT32","data":[0,4294967295]},` +
		`{"name":"d","shape":[2],"datatype":"FP64","data":[0.1,-1e300]},` +
		`{"name":"e","shape":[3],"datatype":"FP16","data":[0.000061035156,-0.33325195,5e-8]},` +
		`{"name":"f","shape":[1],"datatype":"UINT8","data":[7]},` +
		`{"name":"g","shape":[2],"datatype":"FP32","data":[3.4028235e38,1e-45]}]}`
	var req gateway.InferRequest
	if err := DecodeInferRequest([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	out, err := AppendInferResponse(nil, &gateway.InferResponse{ModelName: "m", Outputs: req.Inputs})
	if err != nil {
		t.Fatal(err)
	}
	in := strings.Replace(string(out), `"model_name":"m","outputs"`, `"inputs"`, 1)
	var again gateway.InferRequest
	if err := DecodeInferRequest([]byte(in), &again); err != nil {
		t.Fatalf("decode of encoded %s: %v", in, err)
	}
	if diff := cmp.Diff(req.Inputs, again.Inputs); diff != "" {
		t.Errorf("round trip (-first +second):\n%s", diff)
	}
}

func FuzzDecodeInferRequest(f *testing.F) {
	f.Add([]byte(`{"id":"1","inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4]]}],"outputs":[{"name":"y"}]}`))
	f.Add([]byte(`{"inputs":[{"data":["a","\u00e9"],"name":"s","shape":[2],"datatype":"BYTES"}]}`))
	f.Add([]byte(`{"inputs":[{"name":"b","shape":[1],"datatype":"BOOL","data":[true]},{"name":"h","shape":[1],"datatype":"FP16","data":[1e-7]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req gateway.InferRequest
		err := DecodeInferRequest(body, &req)
		if err != nil {
			if !errors.Is(err, gateway.ErrBadInput) {
				t.Fatalf("error %v does not match ErrBadInput", err)
			}
			return
		}
		for _, in := range req.Inputs {
			if err := in.Validate(); err != nil {
				t.Fatalf("accepted an invalid tensor: %v", err)
			}
		}
		out, err := AppendInferResponse(nil, &gateway.InferResponse{ModelName: "m", ID: req.ID, Outputs: req.Inputs})
		if err != nil {
			t.Fatalf("cannot encode what was decoded: %v", err)
		}
		if !json.Valid(out) {
			t.Fatalf("encoder wrote invalid JSON: %s", out)
		}
	})
}

var benchBody = testharness.InferBody

func BenchmarkDecodeInferRequest(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	var req gateway.InferRequest
	for b.Loop() {
		if err := DecodeInferRequest(benchBody, &req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendInferResponse(b *testing.B) {
	var req gateway.InferRequest
	if err := DecodeInferRequest(benchBody, &req); err != nil {
		b.Fatal(err)
	}
	resp := gateway.InferResponse{ModelName: "m", ID: "42", Parameters: []gateway.Param{{Key: "piccolo.e2e_ms", Value: 1.25}}, Outputs: req.Inputs}
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = AppendInferResponse(buf[:0], &resp); err != nil {
			b.Fatal(err)
		}
	}
}
