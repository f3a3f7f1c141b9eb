package kserve

import (
	"bytes"
	"compress/gzip"
	"errors"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/piccolo-serving/piccolo/gateway"
)

// FuzzGzipBody feeds arbitrary bytes as a gzip (or deflate) request body
// through what an infer request takes: decompression under --max-body and
// the in-flight budget (requestBody), then the JSON decoder. Nothing may
// panic; every refusal is bad input, too large, busy or an unsupported
// encoding; the budget is all given back.
func FuzzGzipBody(f *testing.F) {
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write(b)
		w.Close()
		return buf.Bytes()
	}
	f.Add(gz([]byte(goodBody)), false)
	f.Add(gz(append([]byte(`{"inputs":[{"name":"x","shape":[100000],"datatype":"FP64","data":[0`), bytes.Repeat([]byte(",0"), 3000)...)), false)
	f.Add(gz(bytes.Repeat([]byte(" "), 1<<16)), false)
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, false)
	f.Add([]byte{0x78, 0x9c, 3, 0, 0, 0, 0, 1}, true)
	f.Fuzz(func(t *testing.T, body []byte, deflate bool) {
		var ctx fasthttp.RequestCtx
		enc := "gzip"
		if deflate {
			enc = "deflate"
		}
		ctx.Request.Header.Set("Content-Encoding", enc)
		ctx.Request.SetBody(body)
		b := &inflightBudget{limit: 256 << 10}
		h := hold{b: b}
		plain, err := requestBody(&ctx, 128<<10, &h)
		if err == nil {
			var req gateway.InferRequest
			ext := binaryExt{budget: b}
			err = decodeRequest(plain, &req, &ext)
			h.n += ext.held
		}
		h.release()
		if err != nil && !errors.Is(err, gateway.ErrBadInput) && !errors.Is(err, gateway.ErrTooLarge) && !errors.Is(err, errBusy) {
			t.Fatalf("error %v is none of bad input, too large, busy", err)
		}
		if n := b.used.Load(); n != 0 {
			t.Fatalf("%d bytes of the budget still held", n)
		}
	})
}
