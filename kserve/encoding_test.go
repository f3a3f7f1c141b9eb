package kserve

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"

	"github.com/piccolo-serving/piccolo/api/inference"
)

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zlibbed(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// post sends body to path with the given headers over real HTTP (net/http's
// client, which leaves Content-Encoding and Accept-Encoding as we set them)
// and returns the status, the response's Content-Encoding and its body as read
// off the wire.
func post(t *testing.T, url string, body []byte, headers ...string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	tr := &http.Transport{DisableCompression: true}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Encoding"), b
}

// TestHTTPContentEncoding: compressed request bodies are decoded, the
// --max-body limit holds after decompression (a zip bomb is 413), an encoding
// we cannot decode is 415, and responses are compressed as Accept-Encoding
// asks.
func TestHTTPContentEncoding(t *testing.T) {
	ts := startServers(t, 4096)
	url := ts.url + "/v2/models/chain/infer"
	bomb := gzipped(t, append([]byte(goodBody[:len(goodBody)-1]), append(bytes.Repeat([]byte(" "), 1<<20), '}')...))
	if len(bomb) > 4096 {
		t.Fatalf("the bomb is %d bytes compressed: it must pass the limit before decompression", len(bomb))
	}
	for _, tc := range []struct {
		name    string
		body    []byte
		headers []string
		status  int
		errHas  string
	}{
		{"gzip", gzipped(t, []byte(goodBody)), []string{"Content-Encoding", "gzip"}, 200, ""},
		{"deflate", zlibbed(t, []byte(goodBody)), []string{"Content-Encoding", "deflate"}, 200, ""},
		{"identity", []byte(goodBody), []string{"Content-Encoding", "identity"}, 200, ""},
		{"zip bomb", bomb, []string{"Content-Encoding", "gzip"}, 413, "decompresses (Content-Encoding gzip) to more than the limit of 4096 bytes"},
		{"not gzip", []byte(goodBody), []string{"Content-Encoding", "gzip"}, 400, "does not decompress as Content-Encoding gzip says"},
		{"unknown encoding", []byte(goodBody), []string{"Content-Encoding", "compress"}, 415, `unsupported content encoding \"compress\"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, _, b := post(t, url, tc.body, tc.headers...)
			if status != tc.status {
				t.Fatalf("status %d (%s), want %d", status, b, tc.status)
			}
			if tc.errHas != "" && !strings.Contains(string(b), tc.errHas) {
				t.Errorf("body %s does not say %q", b, tc.errHas)
			}
			// The decompressor's Go error stays in the log.
			if strings.Contains(string(b), "gzip: ") || strings.Contains(string(b), "flate: ") {
				t.Errorf("body %s names the decompressor's Go error", b)
			}
		})
	}
	t.Run("gzip response", func(t *testing.T) {
		status, enc, b := post(t, url, []byte(goodBody), "Accept-Encoding", "gzip")
		if status != 200 || enc != "gzip" {
			t.Fatalf("status %d, Content-Encoding %q; want 200 gzip", status, enc)
		}
		r, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := io.ReadAll(r)
		var m map[string]any
		if err := json.Unmarshal(plain, &m); err != nil || m["id"] != "q7" {
			t.Errorf("gunzipped response %s: %v", plain, err)
		}
	})
}

// TestVersions: a session has version 1 only; any other is 404 / NOT_FOUND,
// as Triton answers, on every route that takes a version.
func TestVersions(t *testing.T) {
	ts := startServers(t, 0)
	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/v2/models/chain/versions/1/infer", goodBody, 200},
		{"POST", "/v2/models/chain/versions/99/infer", goodBody, 404},
		{"POST", "/v2/models/chain/versions//infer", goodBody, 404},
		{"GET", "/v2/models/chain/versions/1", "", 200},
		{"GET", "/v2/models/chain/versions/2", "", 404},
		{"GET", "/v2/models/chain/versions/2/ready", "", 404},
		{"POST", "/v2/models/nope/versions/2/infer", goodBody, 404},
	} {
		status, _, b := post(t, ts.url+tc.path, []byte(tc.body))
		if tc.method == "GET" {
			resp, err := http.Get(ts.url + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
		}
		if status != tc.status {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, status, b, tc.status)
		}
		if status == 404 && strings.Contains(tc.path, "chain/versions/") && !strings.Contains(tc.path, "//") && !strings.Contains(string(b), `versions: 1`) {
			t.Errorf("%s %s: %s does not list the versions", tc.method, tc.path, b)
		}
	}
	ctx := context.Background()
	_, err := ts.grpc.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "chain", ModelVersion: "2"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("gRPC ModelInfer version 2: %v, want NotFound", err)
	}
	_, err = ts.grpc.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "chain", Version: "2"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("gRPC ModelMetadata version 2: %v, want NotFound", err)
	}
	if _, err := ts.grpc.ModelReady(ctx, &inference.ModelReadyRequest{Name: "chain", Version: "1"}); err != nil {
		t.Errorf("gRPC ModelReady version 1: %v", err)
	}
}

// TestGRPCGzip: a gRPC client may compress its messages with gzip.
func TestGRPCGzip(t *testing.T) {
	ts := startServers(t, 0)
	req := &inference.ModelInferRequest{ModelName: "chain", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "x", Datatype: "FP32", Shape: []int64{1, 2},
		Contents: &inference.InferTensorContents{Fp32Contents: []float32{1, 2}}}}}
	resp, err := ts.grpc.ModelInfer(context.Background(), req, grpc.UseCompressor(grpcgzip.Name))
	if err != nil || len(resp.GetRawOutputContents()) != 1 {
		t.Fatalf("gzip ModelInfer: %v %v", resp, err)
	}
}
