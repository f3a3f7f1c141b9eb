package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// transport sends requests of one protocol to one session. infer and metadata
// are called from many goroutines at once.
type transport interface {
	// metadata asks the server for the session's model metadata.
	metadata(ctx context.Context) (modelMetadata, error)
	// infer sends request id with payload p and classifies the outcome.
	infer(ctx context.Context, id uint64, p *Payload) kind
	// close releases connections; infer calls still running fail soon after.
	close()
}

// metadataTimeout is the least time the model metadata call is given: it runs once,
// before the schedule, and may include connecting.
const metadataTimeout = 5 * time.Second

// modelMetadata is what Run reads from the server's model metadata.
type modelMetadata struct {
	inputs []TensorSpec
	slo    time.Duration // 0 when the server does not say
}

var _ transport = (*httpTransport)(nil)

// httpTransport speaks KServe v2 over HTTP/1.1 with fasthttp.
type httpTransport struct {
	client   *fasthttp.HostClient
	inferURI string // scheme://host/base/v2/models/{session}/infer
	metaURI  string // scheme://host/base/v2/models/{session}
	timeout  time.Duration
}

// newHTTPTransport parses target ("http://host:port[/base]", "https://...", or a
// bare "host:port") and returns a client allowing maxConns connections.
func newHTTPTransport(target, session string, timeout time.Duration, maxConns int) (*httpTransport, error) {
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("target %q: %w", target, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("target %q: scheme %q; allowed for --protocol http: http, https (or a bare host:port)", target, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("target %q: no host; give e.g. http://127.0.0.1:8000", target)
	}
	tls := u.Scheme == "https"
	base := u.Scheme + "://" + u.Host + strings.TrimSuffix(u.EscapedPath(), "/") + "/v2/models/" + url.PathEscape(session)
	return &httpTransport{
		client: &fasthttp.HostClient{
			Addr:                   fasthttp.AddMissingPort(u.Host, tls),
			IsTLS:                  tls,
			Name:                   "piccolo-loadgen",
			MaxConns:               maxConns,
			ReadTimeout:            timeout,
			WriteTimeout:           timeout,
			MaxIdleConnDuration:    30 * time.Second,
			DisablePathNormalizing: true,
		},
		inferURI: base + "/infer",
		metaURI:  base,
		timeout:  timeout,
	}, nil
}

const idPrefix = `{"id":"`

var binaryHeader = "Inference-Header-Content-Length"

func (h *httpTransport) infer(_ context.Context, id uint64, p *Payload) kind {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(h.inferURI)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	var num [20]byte
	ids := strconv.AppendUint(num[:0], id, 10)
	req.AppendBodyString(idPrefix)
	req.AppendBody(ids)
	req.AppendBodyString(`",`)
	req.AppendBody(p.jsonRest)
	if p.binary != nil {
		var hl [20]byte
		jsonLen := len(idPrefix) + len(ids) + 2 + len(p.jsonRest)
		req.Header.SetContentType("application/octet-stream")
		req.Header.SetBytesV(binaryHeader, strconv.AppendInt(hl[:0], int64(jsonLen), 10))
		req.AppendBody(p.binary)
	}
	err := h.client.DoTimeout(req, resp, h.timeout)
	switch {
	case err == nil:
		return httpKind(resp.StatusCode())
	case errors.Is(err, fasthttp.ErrTimeout):
		return kindTimeout
	case errors.Is(err, fasthttp.ErrNoFreeConns):
		return kindDropped
	}
	return kindTransport
}

// metadata reads GET /v2/models/{session}: the declared inputs and, when the
// gateway gives it, the SLO from parameters.slo_ms (a number or a numeric string).
func (h *httpTransport) metadata(context.Context) (modelMetadata, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(h.metaURI)
	req.Header.SetMethod(fasthttp.MethodGet)
	if err := h.client.DoTimeout(req, resp, max(h.timeout, metadataTimeout)); err != nil {
		return modelMetadata{}, fmt.Errorf("GET %s: %w", h.metaURI, err)
	}
	if sc := resp.StatusCode(); sc != fasthttp.StatusOK {
		return modelMetadata{}, fmt.Errorf("GET %s: status %d: %.200s", h.metaURI, sc, resp.Body())
	}
	var m struct {
		Inputs     []TensorSpec               `json:"inputs"`
		Parameters map[string]json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal(resp.Body(), &m); err != nil {
		return modelMetadata{}, fmt.Errorf("GET %s: %w", h.metaURI, err)
	}
	md := modelMetadata{inputs: m.Inputs}
	if raw, ok := m.Parameters["slo_ms"]; ok {
		ms, err := strconv.ParseFloat(strings.Trim(string(raw), `"`), 64)
		if err != nil || !(ms > 0) {
			return md, fmt.Errorf("GET %s: parameters.slo_ms %s is not a positive number", h.metaURI, raw)
		}
		md.slo = time.Duration(ms * float64(time.Millisecond))
	}
	return md, nil
}

func (h *httpTransport) close() { h.client.CloseIdleConnections() }
