package kserve

import (
	"errors"

	"github.com/valyala/fasthttp"

	"github.com/piccolo-serving/piccolo/gateway"
)

// errUnsupportedEncoding is a request body in a Content-Encoding the server
// cannot decode (HTTP 415).
var errUnsupportedEncoding = errors.New("unsupported content encoding")

// requestBody returns the infer request's body, decompressed when its
// Content-Encoding is gzip, deflate (zlib), br or zstd (fasthttp's decoders:
// BodyUncompressedWithLimit), and at most max bytes after decompression, so
// that --max-body bounds the memory a request takes whatever its compressed
// size: a larger one (a zip bomb) is ErrTooLarge, 413. An uncompressed body
// is returned as is (fasthttp has already held it to max). The decompressed
// body is a fresh buffer, which the decoders copy out of like any body.
func requestBody(ctx *fasthttp.RequestCtx, max int) ([]byte, error) {
	enc := ctx.Request.Header.ContentEncoding()
	if len(enc) == 0 || string(enc) == "identity" {
		return ctx.PostBody(), nil
	}
	b, err := ctx.Request.BodyUncompressedWithLimit(max)
	switch {
	case err == nil:
		return b, nil
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return nil, gateway.Public(gateway.ErrTooLarge, "%v: the body decompresses (Content-Encoding %s) to more than the limit of %d bytes (--max-body)", gateway.ErrTooLarge, enc, max)
	case errors.Is(err, fasthttp.ErrContentEncodingUnsupported):
		return nil, gateway.Public(errUnsupportedEncoding, "%v %q: send the body as is, or with Content-Encoding gzip, deflate, br or zstd", errUnsupportedEncoding, enc)
	}
	return nil, gateway.BadInput("the body does not decompress as Content-Encoding %s says: %v", enc, err)
}
