package kserve

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	gojson "github.com/goccy/go-json"

	"github.com/piccolo-serving/piccolo/gateway"
)

// imageBody returns a KServe v2 JSON request of one FP32 input of shape
// [1, 3, 224, 224] (an ImageNet-sized image, 150528 elements), flat, each value
// a normalised pixel in [0, 1) printed with bits 32 (the shortest decimal that
// reads back as the same float32, as Go and JavaScript clients write: about
// 1.5 MB) or 64 (the float64 that float32 widens to, as Python's json writes
// numpy float32 values: 17 digits, about 2.9 MB).
func imageBody(bits int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := []byte(`{"id":"img","inputs":[{"name":"input0","shape":[1,3,224,224],"datatype":"FP32","data":[`)
	for i := range 3 * 224 * 224 {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, float64(r.Float32()), 'g', -1, bits)
	}
	return append(b, "]}]}"...)
}

// goccyRequest is the same request as a struct that a general decoder fills:
// the reference point of BenchmarkDecodeImage.
type goccyRequest struct {
	ID     string `json:"id"`
	Inputs []struct {
		Name     string    `json:"name"`
		Shape    []int64   `json:"shape"`
		Datatype string    `json:"datatype"`
		Data     []float32 `json:"data"`
	} `json:"inputs"`
}

// BenchmarkDecodeImage decodes the 1×3×224×224 FP32 bodies (imageBody) with
// DecodeInferRequest and, in the same run, with goccy/go-json into a struct
// with a []float32 (a general decoder's best case: no tensor bytes, no checks
// of shape against data). Compare piccolo/X with goccy/X:
//
//	go test -run '^$' -bench DecodeImage -count 6 ./kserve
func BenchmarkDecodeImage(b *testing.B) {
	for _, body := range []struct {
		name string
		b    []byte
	}{{"shortest", imageBody(32)}, {"float64", imageBody(64)}} {
		b.Run("piccolo/"+body.name, func(b *testing.B) {
			b.SetBytes(int64(len(body.b)))
			b.ReportAllocs()
			var req gateway.InferRequest
			for b.Loop() {
				if err := DecodeInferRequest(body.b, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("goccy/"+body.name, func(b *testing.B) {
			b.SetBytes(int64(len(body.b)))
			b.ReportAllocs()
			for b.Loop() {
				var req goccyRequest
				if err := gojson.Unmarshal(body.b, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestImageBodyDecodesAsGoccy checks that the benchmark's decoders agree:
// the same float32 bits from both bodies.
func TestImageBodyDecodesAsGoccy(t *testing.T) {
	for _, bits := range []int{32, 64} {
		body := imageBody(bits)
		var req gateway.InferRequest
		if err := DecodeInferRequest(body, &req); err != nil {
			t.Fatal(err)
		}
		var ref goccyRequest
		if err := gojson.Unmarshal(body, &ref); err != nil {
			t.Fatal(err)
		}
		data := ref.Inputs[0].Data
		if len(req.Inputs[0].Data) != 4*len(data) {
			t.Fatalf("bits %d: %d bytes, want %d", bits, len(req.Inputs[0].Data), 4*len(data))
		}
		for i, f := range data {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(req.Inputs[0].Data[4*i:])); got != f {
				t.Fatalf("bits %d: element %d = %v, goccy %v", bits, i, got, f)
			}
		}
	}
}
