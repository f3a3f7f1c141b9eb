package kserve

import (
	"errors"
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/piccolo-serving/piccolo/gateway"
)

// errUnsupportedEncoding is a request body in a Content-Encoding the server
// cannot decode (HTTP 415).
var errUnsupportedEncoding = errors.New("unsupported content encoding")

// requestBody returns the infer request's body, decompressed when its
// Content-Encoding is gzip, deflate (zlib), br or zstd (fasthttp's streaming
// decoders, WriteGunzip and its siblings), and at most max bytes after
// decompression, so that --max-body bounds the memory a request takes
// whatever its compressed size: a larger one (a zip bomb) is ErrTooLarge,
// 413. The decompressed bytes are taken from the request's hold of the
// in-flight budget as they inflate (limitWriter): a body that would push the
// gateway past --max-inflight-bytes stops there, errBusy (503). An
// uncompressed body is returned as is (fasthttp has already held it to max).
// The decompressed body is a fresh buffer, which the decoders copy out of
// like any body.
func requestBody(ctx *fasthttp.RequestCtx, max int, h *hold) ([]byte, error) {
	enc := ctx.Request.Header.ContentEncoding()
	if len(enc) == 0 || string(enc) == "identity" {
		return ctx.PostBody(), nil
	}
	w := limitWriter{max: max}
	if h != nil {
		w.b = h.b
	}
	var err error
	switch body := ctx.PostBody(); string(enc) {
	case "gzip":
		_, err = fasthttp.WriteGunzip(&w, body)
	case "deflate":
		_, err = fasthttp.WriteInflate(&w, body)
	case "br":
		_, err = fasthttp.WriteUnbrotli(&w, body)
	case "zstd":
		_, err = fasthttp.WriteUnzstd(&w, body)
	default:
		return nil, gateway.Public(errUnsupportedEncoding, "%v %q: send the body as is, or with Content-Encoding gzip, deflate, br or zstd", errUnsupportedEncoding, enc)
	}
	if h != nil {
		h.n += int64(w.taken) // given back when the request is answered, whatever happened
	}
	switch {
	case err == nil:
		if w.buf == nil {
			w.buf = []byte{}
		}
		return w.buf, nil
	case w.over:
		return nil, gateway.Public(gateway.ErrTooLarge, "%v: the body decompresses (Content-Encoding %s) to more than the limit of %d bytes (--max-body)", gateway.ErrTooLarge, enc, max)
	case errors.Is(err, errBusy):
		return nil, err
	}
	// The decompressor's own error (a Go error text, offsets) goes to the
	// log under the request id, not to the client.
	return nil, fmt.Errorf("%w: %v", gateway.BadInput("the body does not decompress as Content-Encoding %s says", enc), err)
}
