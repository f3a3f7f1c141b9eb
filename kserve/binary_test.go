package kserve

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/gateway/gatewaytest"
)

// binaryBody is a request of the binary tensor data extension: header JSON,
// then the tails in order.
func binaryBody(header string, tails ...[]byte) ([]byte, int) {
	b := []byte(header)
	for _, t := range tails {
		b = append(b, t...)
	}
	return b, len(header)
}

func TestDecodeBinaryInferRequest(t *testing.T) {
	img := []byte("\x89PNG\r\n\x1a\n\x00\xff") // not UTF-8: what JSON strings cannot carry
	bytesElem := binary.LittleEndian.AppendUint32(nil, uint32(len(img)))
	bytesElem = append(bytesElem, img...)
	body, n := binaryBody(`{"id":"b1","inputs":[`+
		`{"name":"x","shape":[1,3],"datatype":"FP32","parameters":{"binary_data_size":12}},`+
		`{"name":"j","shape":[2],"datatype":"INT32","data":[7,8]},`+
		`{"name":"image","shape":[1],"datatype":"BYTES","parameters":{"content_type":"x","binary_data_size":`+strconv.Itoa(len(bytesElem))+`}}]}`,
		gatewaytest.FP32(1, 2, 3), bytesElem)
	var req gateway.InferRequest
	if err := DecodeBinaryInferRequest(body, n, &req); err != nil {
		t.Fatal(err)
	}
	want := gateway.InferRequest{ID: "b1", Inputs: []api.Tensor{
		{Name: "x", Datatype: "FP32", Shape: []int64{1, 3}, Data: gatewaytest.FP32(1, 2, 3)},
		{Name: "j", Datatype: "INT32", Shape: []int64{2}, Data: gatewaytest.LE32(7, 8)},
		{Name: "image", Datatype: "BYTES", Shape: []int64{1}, Data: bytesElem},
	}}
	if diff := cmp.Diff(want, req); diff != "" {
		t.Fatalf("decoded (-want +got):\n%s", diff)
	}
	for i := range body {
		body[i] = 0 // the server reuses its buffer; the tensors must not see it
	}
	if diff := cmp.Diff(want, req); diff != "" {
		t.Errorf("the tensors alias the body (-want +got):\n%s", diff)
	}
	if cap(req.Inputs[0].Data) != len(req.Inputs[0].Data) {
		t.Errorf("input x has cap %d > len %d: an append would write into the next input", cap(req.Inputs[0].Data), len(req.Inputs[0].Data))
	}
}

func TestDecodeBinaryInferRequestErrors(t *testing.T) {
	fp32In := func(size int) string {
		return `{"inputs":[{"name":"x","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":` + strconv.Itoa(size) + `}}]}`
	}
	tests := []struct {
		name      string
		header    string
		tail      []byte
		headerLen int // 0: len(header)
		want      string
	}{
		{"size overruns the body", fp32In(8), make([]byte, 4), 0, `input "x": binary_data_size 8 overruns the body: 4 bytes`},
		{"sizes short of the body", fp32In(8), make([]byte, 12), 0, "add up to 8 bytes but the body has 12 bytes after the"},
		{"tail without binary inputs", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`, make([]byte, 3), 0, "no input has \"binary_data_size\""},
		{"header beyond the body", fp32In(8), make([]byte, 8), 1000, "1000 is beyond the body of"},
		{"size disagrees with shape", fp32In(4), make([]byte, 4), 0, `input "x": binary_data_size 4 does not fit FP32 shape [2]: want 8 bytes (2 elements of 4 bytes)`},
		{"data and binary_data_size", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1],"parameters":{"binary_data_size":4}}]}`, make([]byte, 4), 0, `input "x": has both "data" and "parameters": {"binary_data_size": 4}`},
		{"bad BYTES framing", `{"inputs":[{"name":"s","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":6}}]}`, []byte{9, 0, 0, 0, 'a', 'b'}, 0, `input "s": binary BYTES data do not fit shape [1]`},
		{"negative size", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":-4}}]}`, nil, 0, `"binary_data_size" must be a non-negative integer`},
		{"header is not JSON", `{"inputs":`, make([]byte, 4), 0, "malformed JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, n := binaryBody(tc.header, tc.tail)
			if tc.headerLen != 0 {
				n = tc.headerLen
			}
			var req gateway.InferRequest
			err := DecodeBinaryInferRequest(body, n, &req)
			if !errors.Is(err, gateway.ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want ErrBadInput containing %q", err, tc.want)
			}
		})
	}
	t.Run("binary_data_size without the header", func(t *testing.T) {
		var req gateway.InferRequest
		err := DecodeInferRequest([]byte(fp32In(8)), &req)
		if !errors.Is(err, gateway.ErrBadInput) || !strings.Contains(err.Error(), "needs the request header "+HeaderContentLength) {
			t.Fatalf("error %v; want one naming %s", err, HeaderContentLength)
		}
	})
}

// postBinary posts body with the extension's header (headerLen < 0: without
// it) and returns the status, the response header length ("" without one) and
// the body.
func postBinary(t *testing.T, url string, body []byte, headerLen int) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if headerLen >= 0 {
		req.Header.Set(HeaderContentLength, strconv.Itoa(headerLen))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get(HeaderContentLength), out
}

// TestHTTPBinaryExtension: binary inputs in, and outputs back in binary when
// the request asks (request-level binary_data_output, or per output), JSON
// otherwise; errors are 400 with {"error": ...}.
func TestHTTPBinaryExtension(t *testing.T) {
	ts := startServers(t, 4096)
	url := ts.url + "/v2/models/echo/infer"
	in := `{"name":"x","shape":[1,3],"datatype":"FP32","parameters":{"binary_data_size":12}}`
	data := gatewaytest.FP32(1.5, -2, 3)

	t.Run("binary in, JSON out", func(t *testing.T) {
		body, n := binaryBody(`{"id":"a","inputs":[`+in+`]}`, data)
		status, hl, out := postBinary(t, url, body, n)
		if status != 200 || hl != "" {
			t.Fatalf("status %d, %s %q: %s", status, HeaderContentLength, hl, out)
		}
		var r struct {
			Outputs []struct {
				Name string
				Data []float64
			}
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("response is not JSON: %v: %s", err, out)
		}
		if len(r.Outputs) != 1 || !cmp.Equal(r.Outputs[0].Data, []float64{1.5, -2, 3}) {
			t.Errorf("outputs %+v, want x = [1.5 -2 3]", r.Outputs)
		}
	})
	for _, tc := range []struct{ name, header string }{
		{"binary_data_output", `{"parameters":{"binary_data_output":true},"inputs":[` + in + `]}`},
		{"output binary_data", `{"inputs":[` + in + `],"outputs":[{"name":"x","parameters":{"binary_data":true}}]}`},
	} {
		t.Run("binary out via "+tc.name, func(t *testing.T) {
			body, n := binaryBody(tc.header, data)
			status, hl, out := postBinary(t, url, body, n)
			if status != 200 {
				t.Fatalf("status %d: %s", status, out)
			}
			headerLen, err := strconv.Atoi(hl)
			if err != nil || headerLen > len(out) {
				t.Fatalf("%s %q for a body of %d bytes", HeaderContentLength, hl, len(out))
			}
			var r struct {
				Outputs []struct {
					Name       string
					Data       []float64
					Parameters struct {
						BinaryDataSize int `json:"binary_data_size"`
					}
				}
			}
			if err := json.Unmarshal(out[:headerLen], &r); err != nil {
				t.Fatalf("header is not JSON: %v: %q", err, out[:headerLen])
			}
			if len(r.Outputs) != 1 || r.Outputs[0].Parameters.BinaryDataSize != 12 || r.Outputs[0].Data != nil {
				t.Fatalf("outputs %+v, want x with binary_data_size 12 and no data", r.Outputs)
			}
			if !bytes.Equal(out[headerLen:], data) {
				t.Errorf("binary tail % x, want % x", out[headerLen:], data)
			}
		})
	}
	t.Run("JSON request asks binary output", func(t *testing.T) {
		status, hl, out := postBinary(t, url, []byte(`{"parameters":{"binary_data_output":true},"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[5]}]}`), -1)
		if status != 200 || hl == "" || !bytes.HasSuffix(out, gatewaytest.LE32(5)) {
			t.Fatalf("status %d, %s %q, body %q; want binary output 05 00 00 00", status, HeaderContentLength, hl, out)
		}
	})
	t.Run("binary_data false overrides binary_data_output", func(t *testing.T) {
		body, n := binaryBody(`{"parameters":{"binary_data_output":true},"inputs":[`+in+`],"outputs":[{"name":"x","parameters":{"binary_data":false}}]}`, data)
		status, hl, out := postBinary(t, url, body, n)
		if status != 200 || !json.Valid(out) {
			t.Fatalf("status %d: %s", status, out)
		}
		if hl != "" && hl != strconv.Itoa(len(out)) {
			t.Errorf("%s %q with no binary output: the whole body %d bytes should be JSON", HeaderContentLength, hl, len(out))
		}
		if !bytes.Contains(out, []byte(`"data":[1.5,-2,3]`)) {
			t.Errorf("body %s; want x as JSON data", out)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			body      []byte
			headerLen int
			want      string
		}{
			{"overrun", append([]byte(`{"inputs":[`+in+`]}`), 1, 2), len(`{"inputs":[` + in + `]}`), `input "x": binary_data_size 12 overruns the body`},
			{"header beyond body", []byte(`{"inputs":[` + in + `]}`), 5000, "is beyond the body"},
			{"size vs shape", append([]byte(`{"inputs":[`+strings.Replace(in, "12", "8", 1)+`]}`), data[:8]...), len(`{"inputs":[`+in+`]}`) - 1, `input "x": binary_data_size 8 does not fit FP32 shape [1 3]`},
		} {
			status, _, out := postBinary(t, url, tc.body, tc.headerLen)
			var e struct{ Error string }
			if err := json.Unmarshal(out, &e); status != 400 || err != nil || !strings.Contains(e.Error, tc.want) {
				t.Errorf("%s: status %d, body %s; want 400 with an error containing %q", tc.name, status, out, tc.want)
			}
		}
	})
}

// TestHTTPServerMetadataListsBinaryExtension: server metadata announces the
// extensions (binary data, statistics), as Triton does, so clients know they may use it.
func TestHTTPServerMetadataListsBinaryExtension(t *testing.T) {
	ts := startServers(t, 4096)
	resp, err := http.Get(ts.url + "/v2")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var md struct {
		Name, Version string
		Extensions    []string
	}
	if err := json.Unmarshal(out, &md); err != nil || !cmp.Equal(md.Extensions, []string{ExtensionBinaryData, ExtensionStatistics}) {
		t.Errorf("GET /v2 = %s (%v); want extensions [%q %q]", out, err, ExtensionBinaryData, ExtensionStatistics)
	}
}

// FuzzDecodeBinaryInferRequest: any body and header length is either refused
// with ErrBadInput or decoded into valid tensors that own their data.
func FuzzDecodeBinaryInferRequest(f *testing.F) {
	seed := func(header string, tail []byte) {
		body, n := binaryBody(header, tail)
		f.Add(body, n)
	}
	seed(`{"inputs":[{"name":"x","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}]}`, gatewaytest.FP32(1, 2))
	seed(`{"inputs":[{"name":"s","shape":[2],"datatype":"BYTES","parameters":{"binary_data_size":9}},{"name":"j","shape":[1],"datatype":"BOOL","data":[true]}]}`, gatewaytest.BytesElems("ab", "c"))
	seed(`{"parameters":{"binary_data_output":true},"inputs":[{"name":"x","shape":[1],"datatype":"INT8","parameters":{"binary_data_size":1}}],"outputs":[{"name":"x","parameters":{"binary_data":false}}]}`, []byte{7})
	f.Fuzz(func(t *testing.T, body []byte, headerLen int) {
		var req gateway.InferRequest
		err := DecodeBinaryInferRequest(body, headerLen, &req)
		if err != nil {
			if !errors.Is(err, gateway.ErrBadInput) {
				t.Fatalf("error %v does not match ErrBadInput", err)
			}
			return
		}
		for i := range body {
			body[i] ^= 0xff
		}
		for _, in := range req.Inputs {
			if err := in.Validate(); err != nil {
				t.Fatalf("accepted an invalid tensor (or one aliasing the body): %v", err)
			}
		}
		ext := binaryExt{allOut: true}
		out, hl, err := appendBinaryInferResponse(nil, &gateway.InferResponse{ModelName: "m", Outputs: req.Inputs}, &ext)
		if err != nil {
			t.Fatalf("cannot encode what was decoded: %v", err)
		}
		if !json.Valid(out[:hl]) {
			t.Fatalf("encoder wrote an invalid JSON header: %q", out[:hl])
		}
	})
}
