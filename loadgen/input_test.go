package loadgen

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func le32(v ...uint32) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return b
}

func TestParseRequestRaw(t *testing.T) {
	tests := []struct {
		name, body string
		datatype   string
		shape      []int64
		raw        []byte
	}{
		{"fp32 nested", `{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,-2],[0.5,0]]}]}`, "FP32", []int64{2, 2},
			le32(math.Float32bits(1), math.Float32bits(-2), math.Float32bits(0.5), 0)},
		{"int64", `{"inputs":[{"name":"x","shape":[2],"datatype":"INT64","data":[-1,3]}]}`, "INT64", []int64{2},
			[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0, 0, 0, 0, 0}},
		{"uint8", `{"inputs":[{"name":"x","shape":[3],"datatype":"UINT8","data":[0,7,255]}]}`, "UINT8", []int64{3}, []byte{0, 7, 255}},
		{"int16", `{"inputs":[{"name":"x","shape":[1],"datatype":"INT16","data":[-2]}]}`, "INT16", []int64{1}, []byte{0xfe, 0xff}},
		{"bool", `{"inputs":[{"name":"x","shape":[2],"datatype":"BOOL","data":[true,false]}]}`, "BOOL", []int64{2}, []byte{1, 0}},
		{"bytes", `{"inputs":[{"name":"x","shape":[2],"datatype":"BYTES","data":["ab",""]}]}`, "BYTES", []int64{2},
			append(le32(2), 'a', 'b', 0, 0, 0, 0)},
		{"fp16", `{"inputs":[{"name":"x","shape":[3],"datatype":"FP16","data":[1,-2,65504]}]}`, "FP16", []int64{3},
			[]byte{0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b}},
		{"bf16", `{"inputs":[{"name":"x","shape":[1],"datatype":"BF16","data":[1]}]}`, "BF16", []int64{1}, []byte{0x80, 0x3f}},
		{"fp64", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP64","data":[2]}],"id":"old","parameters":{"k":1}}`, "FP64", []int64{1},
			binary.LittleEndian.AppendUint64(nil, math.Float64bits(2))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseRequest([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Tensors) != 1 {
				t.Fatalf("%d tensors, want 1", len(p.Tensors))
			}
			got := p.Tensors[0]
			if got.Datatype != tc.datatype || !cmp.Equal(got.Shape, tc.shape) || !bytes.Equal(got.Data, tc.raw) {
				t.Errorf("tensor %s %v % x, want %s %v % x", got.Datatype, got.Shape, got.Data, tc.datatype, tc.shape, tc.raw)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			// The HTTP body, with an id put in front, is valid JSON without the old id.
			body := append([]byte(`{"id":"9",`), p.jsonRest...)
			var back map[string]any
			if err := json.Unmarshal(body, &back); err != nil {
				t.Fatalf("HTTP body %s: %v", body, err)
			}
			if back["id"] != "9" {
				t.Errorf("HTTP body id %v, want 9", back["id"])
			}
		})
	}
}

func TestParseRequestErrors(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"not json", `{`, "not a JSON object"},
		{"no inputs", `{"id":"1"}`, `no "inputs"`},
		{"empty inputs", `{"inputs":[]}`, `"inputs" is empty`},
		{"no name", `{"inputs":[{"shape":[1],"datatype":"FP32","data":[1]}]}`, `input 0 has no "name"`},
		{"datatype", `{"inputs":[{"name":"x","shape":[1],"datatype":"FLOAT","data":[1]}]}`, `unknown datatype "FLOAT"; allowed: BOOL`},
		{"count", `{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3]}]}`, `shape [2 2] needs 4 elements, "data" has 3`},
		{"no shape", `{"inputs":[{"name":"x","datatype":"FP32","data":[1]}]}`, `no "shape"`},
		{"no data", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32"}]}`, `no "data"`},
		{"negative dim", `{"inputs":[{"name":"x","shape":[-1],"datatype":"FP32","data":[1]}]}`, "dimension 0 is -1"},
		{"range", `{"inputs":[{"name":"x","shape":[1],"datatype":"UINT8","data":[256]}]}`, "UINT8"},
		{"type", `{"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":["a"]}]}`, "not a JSON number"},
		{"binary ext", `{"inputs":[{"name":"x","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":4}}]}`, "binary-data extension"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRequest([]byte(tc.body))
			if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrBadInput containing %q", err, tc.want)
			}
		})
	}
}

func TestLoadInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.json", `{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`)
	img := write("b.png", "\x89PNG fake image bytes \x00\xff")
	write("notes.txt", "ignored in a directory")
	bad := write("c.yaml", "x: 1")

	got, err := LoadInputs([]string{a, dir}, "image")
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, p := range got {
		sources = append(sources, filepath.Base(p.Source))
	}
	if d := cmp.Diff([]string{"a.json", "a.json", "b.png"}, sources); d != "" {
		t.Errorf("sources (-want +got):\n%s", d)
	}
	im := got[2].Tensors[0]
	want := append(le32(uint32(len("\x89PNG fake image bytes \x00\xff"))), "\x89PNG fake image bytes \x00\xff"...)
	if im.Name != "image" || im.Datatype != "BYTES" || !cmp.Equal(im.Shape, []int64{1}) || !bytes.Equal(im.Data, want) {
		t.Errorf("image tensor %s %s %v, want image BYTES [1] with the file bytes", im.Name, im.Datatype, im.Shape)
	}
	if _, err := LoadInputs([]string{img}, "pic"); err != nil {
		t.Errorf("image file alone: %v", err)
	}

	for _, tc := range []struct{ name, path, want string }{
		{"missing", filepath.Join(dir, "nope.json"), "no such file"},
		{"type", bad, `unknown file type ".yaml"; allowed: .json`},
		{"empty dir", t.TempDir(), "no .json, .png or .jpg files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadInputs([]string{tc.path}, "image")
			if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrBadInput containing %q", err, tc.want)
			}
		})
	}
}

// TestImageOverHTTP: an image travels as a BYTES tensor with Triton's
// binary-data extension; the server finds the file bytes after the JSON header.
func TestImageOverHTTP(t *testing.T) {
	ts := startServer(t, &testServer{})
	data := []byte("\x89PNG\r\n\x1a\n not really a png \x00\x01\xfe")
	p, err := ImagePayload("image", data)
	if err != nil {
		t.Fatal(err)
	}
	q, _ := ParseRequest([]byte(`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]}`))
	rep, err := Run(t.Context(), Options{Target: ts.URL, Session: "ocr", Rate: 100, Arrival: "constant", Duration: 40 * time.Millisecond, Payloads: []Payload{p, q}})
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, rep)
	if rep.OK != 4 {
		t.Fatalf("ok %d, errors %v; want 4", rep.OK, rep.Errors)
	}
	images := 0
	bodies, tails := ts.got()
	for i, b := range bodies {
		if len(b.Inputs) == 1 && b.Inputs[0].Name == "image" {
			images++
			want := append(le32(uint32(len(data))), data...)
			if !bytes.Equal(tails[i], want) {
				t.Errorf("binary tail % x, want % x", tails[i], want)
			}
		} else if tails[i] != nil {
			t.Errorf("JSON request %d carried a binary tail", i)
		}
	}
	if images != 2 {
		t.Errorf("%d image requests, want 2 of 4 (payloads cycle)", images)
	}
}

func TestZeroPayloadErrors(t *testing.T) {
	if _, err := ZeroPayload(nil); !errors.Is(err, ErrBadInput) {
		t.Errorf("no inputs: err = %v", err)
	}
	if _, err := ZeroPayload([]TensorSpec{{Name: "x", Datatype: "F32", Shape: []int64{1}}}); err == nil || !strings.Contains(err.Error(), `unknown datatype "F32"`) {
		t.Errorf("bad datatype: err = %v", err)
	}
	p, err := ZeroPayload([]TensorSpec{{Name: "s", Datatype: "BYTES", Shape: []int64{-1, 2}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Tensors[0].Validate(); err != nil || !cmp.Equal(p.Tensors[0].Shape, []int64{1, 2}) {
		t.Errorf("BYTES zero tensor %v: %v", p.Tensors[0].Shape, err)
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[1,2]}]}`))
	f.Add([]byte(`{"inputs":[{"name":"x","shape":[1],"datatype":"BYTES","data":[["a"]]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := ParseRequest(body)
		if err != nil {
			return
		}
		for _, tn := range p.Tensors {
			if err := tn.Validate(); err != nil {
				t.Errorf("accepted a tensor that does not validate: %v", err)
			}
		}
		if !json.Valid(append([]byte(`{"id":"1",`), p.jsonRest...)) {
			t.Errorf("HTTP body is not JSON: %s", p.jsonRest)
		}
	})
}
