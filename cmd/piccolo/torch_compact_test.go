package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/piccolo-serving/piccolo/api/inference"
)

// torchCompactConfig serves the worker's compact-input models (docs/gpu.md,
// "Compact inputs") beside the FP32 classifier, each session on the one
// worker (%q: its address). The profiles are rough CPU figures: the sessions
// run one request at a time here, so only the plumbing depends on them.
const torchCompactConfig = `
hardware:
  - {name: cpu-torch, price: 1}
profiles:
  - model: mobilenet_v3_small
    hardware: cpu-torch
    entries: [{batch: 1, concurrency: 1, duration: 60ms}, {batch: 2, concurrency: 1, duration: 80ms}]
  - model: preprocess
    hardware: cpu-torch
    entries: [{batch: 1, concurrency: 1, duration: 20ms}, {batch: 2, concurrency: 1, duration: 30ms}]
  - model: preprocess+mobilenet_v3_small
    hardware: cpu-torch
    entries: [{batch: 1, concurrency: 1, duration: 70ms}, {batch: 2, concurrency: 1, duration: 100ms}]
  - model: normalize+mobilenet_v3_small
    hardware: cpu-torch
    entries: [{batch: 1, concurrency: 1, duration: 60ms}, {batch: 2, concurrency: 1, duration: 80ms}]
sessions:
  - {name: classify, slo: 5s, modules: [{name: net, model: mobilenet_v3_small, rate: 2}]}
  - {name: decode, slo: 5s, modules: [{name: pre, model: preprocess, rate: 2}]}
  - name: jpeg
    slo: 5s
    modules:
      - {name: pre, model: preprocess, rate: 2}
      - {name: net, model: mobilenet_v3_small, rate: 2, after: [pre]}
  - {name: fused, slo: 5s, modules: [{name: prenet, model: preprocess+mobilenet_v3_small, rate: 2}]}
  - {name: pixels, slo: 5s, modules: [{name: normnet, model: normalize+mobilenet_v3_small, rate: 2}]}
backends:
  - {id: torch-0, address: %q, hardware: cpu-torch}
`

// ImageNet's normalisation, as workers/torch/zoo.py applies it.
var (
	imagenetMean = [3]float64{0.485, 0.456, 0.406}
	imagenetStd  = [3]float64{0.229, 0.224, 0.225}
)

// testPicture is a w×h picture with edges and gradients in every channel, so
// that a decode or normalisation error changes many values.
func testPicture(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			r := uint8(255 * x / max(w-1, 1))
			g := uint8(255 * y / max(h-1, 1))
			b := uint8(0)
			if (x/8+y/8)%2 == 0 {
				b = 220
			}
			img.Set(x, y, color.RGBA{r, g, b, 255})
		}
	}
	return img
}

func encodeJPEG(t *testing.T, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// bytesElement is one BYTES element in KServe's raw layout: a 4-byte
// little-endian length and the bytes.
func bytesElement(b []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// binaryInput is one input of an HTTP binary-extension request.
type binaryInput struct {
	name, datatype string
	shape          []int64
	data           []byte
}

// binaryBody returns the body and JSON header length of a request of the
// binary tensor data extension with inputs, asking for output in binary.
func binaryBody(output string, inputs ...binaryInput) ([]byte, int) {
	var h strings.Builder
	h.WriteString(`{"inputs":[`)
	for i, in := range inputs {
		if i > 0 {
			h.WriteByte(',')
		}
		shape, _ := json.Marshal(in.shape)
		fmt.Fprintf(&h, `{"name":%q,"datatype":%q,"shape":%s,"parameters":{"binary_data_size":%d}}`, in.name, in.datatype, shape, len(in.data))
	}
	fmt.Fprintf(&h, `],"outputs":[{"name":%q,"parameters":{"binary_data":true}}]}`, output)
	body := []byte(h.String())
	headerLen := len(body)
	for _, in := range inputs {
		body = append(body, in.data...)
	}
	return body, headerLen
}

// postBinary posts body (JSON header of headerLen bytes, then binary data) to
// session and returns the status and the one binary output's bytes (or the
// error body).
func postBinary(t *testing.T, url, session string, body []byte, headerLen int) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v2/models/"+session+"/infer", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(headerLen))
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, b
	}
	n, err := strconv.Atoi(resp.Header.Get("Inference-Header-Content-Length"))
	if err != nil || n > len(b) {
		t.Fatalf("%s: response header length %q of a %d-byte body: %v", session, resp.Header.Get("Inference-Header-Content-Length"), len(b), err)
	}
	return resp.StatusCode, b[n:]
}

// floats reads little-endian FP32 bytes.
func floats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// maxDiff returns the largest |a[i]-b[i]| and the largest |a[i]|.
func maxDiff(t *testing.T, what string, a, b []float32) (diff, scale float64) {
	t.Helper()
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("%s: %d values against %d", what, len(a), len(b))
	}
	for i := range a {
		diff = max(diff, math.Abs(float64(a[i])-float64(b[i])))
		scale = max(scale, math.Abs(float64(a[i])))
	}
	return diff, scale
}

// TestTorchWorkerCompactInputs sends encoded images (BYTES) and UINT8 pixels
// through a real gateway, over HTTP's binary extension and gRPC's raw
// contents, to the real worker, whose preprocess module decodes them with
// torchvision: the JPEG through the chain preprocess → mobilenet_v3_small and
// through the fused preprocess+mobilenet_v3_small answers the logits of the
// FP32 request of the same decoded image; a PNG decodes to exactly Go's pixels
// normalised; UINT8 pixels answer the logits of their PNG. Hostile images (a
// header declaring a huge image, corrupt bytes, not an image) are refused
// with 400 / INVALID_ARGUMENT. It logs the bytes on the wire of each form.
func TestTorchWorkerCompactInputs(t *testing.T) {
	w := startTorchWorker(t, "--hardware", "cpu-torch", "--default-batch", "2", "--decode-threads", "2")
	cfgPath := filepath.Join(t.TempDir(), "piccolo.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, torchCompactConfig, w.addr), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	httpAddr, grpcAddr, _ := startGatewayAddrs(t, ctx, &gatewayOptions{files: []string{cfgPath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0",
		policy: "piccolo", dispatch: "tc", maxBody: 4 << 20, slack: 0.1, logFmt: "json", drain: time.Second, noFuse: true})
	url := "http://" + httpAddr
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gc := inference.NewGRPCInferenceServiceClient(conn)
	grpcInfer := func(req *inference.ModelInferRequest) ([]byte, error) {
		c, done := context.WithTimeout(ctx, 60*time.Second)
		defer done()
		resp, err := gc.ModelInfer(c, req)
		if err != nil {
			return nil, err
		}
		if len(resp.GetRawOutputContents()) != 1 {
			t.Fatalf("%s: %d raw outputs; want 1", req.GetModelName(), len(resp.GetRawOutputContents()))
		}
		return resp.GetRawOutputContents()[0], nil
	}
	const s = torchImageSize
	ok := func(session string, body []byte, headerLen int) []byte {
		t.Helper()
		code, b := postBinary(t, url, session, body, headerLen)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", session, code, b)
		}
		return b
	}

	// A JPEG of another size than the model's: decoded and resized by the worker.
	jpg := encodeJPEG(t, testPicture(80, 60))
	jpegBody, jpegHead := binaryBody("logits", binaryInput{"image", "BYTES", []int64{1}, bytesElement(jpg)})
	chain := floats(ok("jpeg", jpegBody, jpegHead))
	jpegGRPC := &inference.ModelInferRequest{ModelName: "fused",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "image", Datatype: "BYTES", Shape: []int64{1}}},
		RawInputContents: [][]byte{bytesElement(jpg)}}
	fusedRaw, err := grpcInfer(jpegGRPC)
	if err != nil {
		t.Fatalf("fused over gRPC: %v", err)
	}
	fused := floats(fusedRaw)

	// The decoded image as FP32, then the FP32 request of it.
	decodeBody, decodeHead := binaryBody("input", binaryInput{"image", "BYTES", []int64{1}, bytesElement(jpg)})
	decoded := ok("decode", decodeBody, decodeHead)
	if len(decoded) != 3*s*s*4 {
		t.Fatalf("decode: %d bytes; want FP32 [1 3 %d %d]", len(decoded), s, s)
	}
	fp32Body, fp32Head := binaryBody("logits", binaryInput{"input", "FP32", []int64{1, 3, s, s}, decoded})
	direct := floats(ok("classify", fp32Body, fp32Head))
	const tolerance = 1e-4 // relative to the largest logit: FP32 on the CPU, the same arithmetic
	for _, c := range []struct {
		name string
		got  []float32
	}{{"the chain preprocess → mobilenet_v3_small (HTTP)", chain}, {"the fused preprocess+mobilenet_v3_small (gRPC)", fused}} {
		if d, scale := maxDiff(t, c.name, direct, c.got); d > tolerance*max(scale, 1) {
			t.Errorf("%s: logits differ from the FP32 request's by up to %g (largest logit %g); want within %g", c.name, d, scale, tolerance*max(scale, 1))
		}
	}

	// A PNG of the model's size decodes exactly: Go's pixels, normalised.
	pic := testPicture(s, s)
	var pngBuf bytes.Buffer
	if err := png.Encode(&pngBuf, pic); err != nil {
		t.Fatal(err)
	}
	pngBody, pngHead := binaryBody("input", binaryInput{"image", "BYTES", []int64{1}, bytesElement(pngBuf.Bytes())})
	got := floats(ok("decode", pngBody, pngHead))
	want := make([]float32, 3*s*s)
	pixels := make([]byte, 3*s*s) // CHW, as a UINT8 client sends them
	for c := range 3 {
		for y := range s {
			for x := range s {
				v := pic.Pix[pic.PixOffset(x, y)+c]
				pixels[(c*s+y)*s+x] = v
				want[(c*s+y)*s+x] = float32((float64(v)/255 - imagenetMean[c]) / imagenetStd[c])
			}
		}
	}
	if d, _ := maxDiff(t, "decoded PNG", want, got); d > 1e-5 {
		t.Errorf("the PNG decoded and normalised by the worker differs from Go's pixels by up to %g; want within 1e-5", d)
	}

	// UINT8 pixels over gRPC answer the logits of their PNG.
	u8GRPC := &inference.ModelInferRequest{ModelName: "pixels",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "pixels", Datatype: "UINT8", Shape: []int64{1, 3, s, s}}},
		RawInputContents: [][]byte{pixels}}
	u8Raw, err := grpcInfer(u8GRPC)
	if err != nil {
		t.Fatalf("pixels over gRPC: %v", err)
	}
	pngLogitsBody, pngLogitsHead := binaryBody("logits", binaryInput{"image", "BYTES", []int64{1}, bytesElement(pngBuf.Bytes())})
	pngLogits := floats(ok("fused", pngLogitsBody, pngLogitsHead))
	if d, scale := maxDiff(t, "UINT8 pixels", pngLogits, floats(u8Raw)); d > tolerance*max(scale, 1) {
		t.Errorf("UINT8 pixels' logits differ from their PNG's by up to %g; want within %g", d, tolerance*max(scale, 1))
	}

	// Hostile images: refused by the worker from the header, or when they do
	// not decode, and answered 400 / INVALID_ARGUMENT by the gateway.
	bomb := append([]byte(nil), jpg...)
	sof := bytes.Index(bomb, []byte{0xFF, 0xC0})
	if sof < 0 {
		t.Fatal("the test JPEG has no SOF0 marker")
	}
	binary.BigEndian.PutUint16(bomb[sof+5:], 65000) // height
	binary.BigEndian.PutUint16(bomb[sof+7:], 65000) // width: 4.2 gigapixels declared in 2 KB
	corrupt := append(append([]byte(nil), jpg[:len(jpg)/3]...), bytes.Repeat([]byte{0x5A}, 200)...)
	for _, c := range []struct {
		name string
		data []byte
	}{{"a header declaring 65000x65000 pixels", bomb}, {"a JPEG cut short and padded with garbage", corrupt}, {"text, not an image", []byte("GIF89a is not allowed either")}} {
		start := time.Now()
		body, head := binaryBody("logits", binaryInput{"image", "BYTES", []int64{1}, bytesElement(c.data)})
		code, b := postBinary(t, url, "fused", body, head)
		if code != http.StatusBadRequest || !strings.Contains(string(b), "bad input") {
			t.Errorf("%s: %d %s; want 400 bad input", c.name, code, b)
		}
		httpTook := time.Since(start)
		req := proto.Clone(jpegGRPC).(*inference.ModelInferRequest)
		req.RawInputContents = [][]byte{bytesElement(c.data)}
		if _, err := grpcInfer(req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s over gRPC: %v; want INVALID_ARGUMENT", c.name, err)
		}
		t.Logf("%s: refused in %v over HTTP, %v over gRPC", c.name, httpTook.Round(time.Millisecond), (time.Since(start) - httpTook).Round(time.Millisecond))
	}
	// A datatype the module does not take is refused by the gateway, naming both.
	wrongBody, wrongHead := binaryBody("logits", binaryInput{"image", "UINT8", []int64{1, 3, s, s}, pixels})
	if code, b := postBinary(t, url, "jpeg", wrongBody, wrongHead); code != http.StatusBadRequest || !strings.Contains(string(b), "wants BYTES") {
		t.Errorf("UINT8 pixels to the JPEG session: %d %s; want 400 naming BYTES", code, b)
	}

	// Bytes on the wire per request, client → gateway, for this 64×64 image.
	var jsonBody bytes.Buffer
	fmt.Fprintf(&jsonBody, `{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,%d,%d],"data":[`, s, s)
	for i, v := range floats(decoded) {
		if i > 0 {
			jsonBody.WriteByte(',')
		}
		jsonBody.WriteString(strconv.FormatFloat(float64(v), 'g', -1, 32))
	}
	jsonBody.WriteString("]}]}")
	fp32GRPC := &inference.ModelInferRequest{ModelName: "classify",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "input", Datatype: "FP32", Shape: []int64{1, 3, s, s}}},
		RawInputContents: [][]byte{decoded}}
	t.Logf("bytes on the wire per request (one %d×%d image; the JPEG is %d×%d, quality 90):", s, s, 80, 60)
	t.Logf("  HTTP JSON FP32 %d, HTTP binary FP32 %d, gRPC raw FP32 %d", jsonBody.Len(), len(fp32Body), proto.Size(fp32GRPC))
	t.Logf("  gRPC raw UINT8 %d, HTTP binary JPEG %d, gRPC raw JPEG %d", proto.Size(u8GRPC), len(jpegBody), proto.Size(jpegGRPC))
	t.Logf("  gateway → worker for the chain: JPEG %d to preprocess, then FP32 %d to the classifier; fused: the JPEG only",
		len(jpg)+4, len(decoded))
}
