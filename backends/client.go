package backends

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
)

// ClientOptions configure a Client. The zero value is usable.
type ClientOptions struct {
	// MaxMessageBytes limits one message each way; default MaxMessageBytes.
	MaxMessageBytes int
	// KeepaliveTime is how long an idle connection waits before pinging the
	// backend; default 30s. A dead backend is noticed within about twice this.
	KeepaliveTime time.Duration
	// DialOptions are appended to the client's own (insecure transport, limits,
	// keepalive).
	DialOptions []grpc.DialOption
	// TLS, when set, is the client's transport security instead of plain
	// text (a backend's api.Backend.TLS; Pool.UseTLS).
	TLS *tls.Config
}

// Client talks KServe v2 gRPC to one backend: a `piccolo backend` or a Triton
// server in explicit model-control mode. It holds one *grpc.ClientConn (HTTP/2,
// multiplexed), connects lazily and reconnects by itself. All methods are safe
// for concurrent use; deadlines come from ctx.
type Client struct {
	addr string
	conn *grpc.ClientConn
	stub inference.GRPCInferenceServiceClient
}

// NewClient returns a Client for the backend at addr ("host:port"). It does not
// connect: the first call does, and a backend that cannot be reached then fails
// that call with ErrBackendUnavailable.
func NewClient(addr string, opts ClientOptions) (*Client, error) {
	if addr == "" {
		return nil, fmt.Errorf("backends: NewClient: address is empty; want host:port")
	}
	max := opts.MaxMessageBytes
	if max <= 0 {
		max = MaxMessageBytes
	}
	ka := opts.KeepaliveTime
	if ka <= 0 {
		ka = 30 * time.Second
	}
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(max), grpc.MaxCallSendMsgSize(max)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: ka, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	}, opts.DialOptions...)
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w: %v", addr, ErrBackendUnavailable, err)
	}
	return &Client{addr: addr, conn: conn, stub: inference.NewGRPCInferenceServiceClient(conn)}, nil
}

// Addr returns the backend's address.
func (c *Client) Addr() string { return c.addr }

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error { return c.conn.Close() }

// Live reports whether the backend is live and ready (ServerLive and ServerReady).
func (c *Client) Live(ctx context.Context) (bool, error) {
	l, err := c.stub.ServerLive(ctx, &inference.ServerLiveRequest{})
	if err != nil {
		return false, fromStatus(ctx, c.addr, "ServerLive", err)
	}
	r, err := c.stub.ServerReady(ctx, &inference.ServerReadyRequest{})
	if err != nil {
		return false, fromStatus(ctx, c.addr, "ServerReady", err)
	}
	return l.GetLive() && r.GetReady(), nil
}

// Ready reports whether model is loaded and ready on the backend.
func (c *Client) Ready(ctx context.Context, model string) (bool, error) {
	r, err := c.stub.ModelReady(ctx, &inference.ModelReadyRequest{Name: model})
	if err != nil {
		return false, fromStatus(ctx, c.addr, fmt.Sprintf("ModelReady %q", model), err)
	}
	return r.GetReady(), nil
}

// Metadata returns model's inputs and outputs as the backend reports them.
func (c *Client) Metadata(ctx context.Context, model string) (ModelInfo, error) {
	r, err := c.stub.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: model})
	if err != nil {
		return ModelInfo{}, fromStatus(ctx, c.addr, fmt.Sprintf("ModelMetadata %q", model), err)
	}
	conv := func(ts []*inference.ModelMetadataResponse_TensorMetadata) []TensorSpec {
		out := make([]TensorSpec, len(ts))
		for i, t := range ts {
			out[i] = TensorSpec{Name: t.GetName(), Datatype: t.GetDatatype(), Shape: t.GetShape()}
		}
		return out
	}
	return ModelInfo{Name: r.GetName(), Platform: r.GetPlatform(), Inputs: conv(r.GetInputs()), Outputs: conv(r.GetOutputs())}, nil
}

// Load asks the backend to load (or reload) model with a max batch and a
// concurrency (lanes), sent as the int64 load parameters "batch" and
// "concurrency"; zero leaves a parameter out (the backend's default).
func (c *Client) Load(ctx context.Context, model string, batch, concurrency int) error {
	if batch < 0 || concurrency < 0 {
		return fmt.Errorf("backend %s: load model %q: %w: batch %d and concurrency %d must be ≥ 0 (0: default)", c.addr, model, ErrInvalidInput, batch, concurrency)
	}
	req := &inference.RepositoryModelLoadRequest{ModelName: model, Parameters: map[string]*inference.ModelRepositoryParameter{}}
	if batch > 0 {
		req.Parameters[ParamBatch] = &inference.ModelRepositoryParameter{ParameterChoice: &inference.ModelRepositoryParameter_Int64Param{Int64Param: int64(batch)}}
	}
	if concurrency > 0 {
		req.Parameters[ParamConcurrency] = &inference.ModelRepositoryParameter{ParameterChoice: &inference.ModelRepositoryParameter_Int64Param{Int64Param: int64(concurrency)}}
	}
	if _, err := c.stub.RepositoryModelLoad(ctx, req); err != nil {
		return fromStatus(ctx, c.addr, fmt.Sprintf("load model %q", model), err)
	}
	return nil
}

// Unload asks the backend to unload model.
func (c *Client) Unload(ctx context.Context, model string) error {
	if _, err := c.stub.RepositoryModelUnload(ctx, &inference.RepositoryModelUnloadRequest{ModelName: model}); err != nil {
		return fromStatus(ctx, c.addr, fmt.Sprintf("unload model %q", model), err)
	}
	return nil
}

// Infer runs one batch made of items on model and returns each item's outputs.
//
// items[i] holds item i's inputs: every item has the same input names, in the
// same order, with the same datatypes and the same dimensions after dimension 0;
// dimension 0 of an item is its row count k_i (1 for one request, k for a
// fanned-out group), equal across its inputs. Infer stacks each input across the
// items on dimension 0 (one ModelInfer, raw_input_contents), then splits every
// output back by the same row counts: out[i][j] is output j of item i, with
// dimension 0 equal to k_i, its Data aliasing the response buffer.
//
// Errors wrap ErrInvalidInput (items inconsistent, or the backend rejected
// them), ErrUnknownModel, ErrModelNotLoaded, ErrBackendUnavailable,
// ErrBackendOverloaded, ErrBackendBadResponse (outputs missing, of the wrong
// size, or not splittable), ErrBackendFailed, or ctx's error.
func (c *Client) Infer(ctx context.Context, model string, items [][]api.Tensor) ([][]api.Tensor, error) {
	out, _, err := c.InferTimed(ctx, model, items)
	return out, err
}

// InferTimed is Infer that also returns how the batch's time at the backend
// split (the response's ParamQueueNanos and ParamComputeNanos; a zero
// Timing from a backend that does not report them).
func (c *Client) InferTimed(ctx context.Context, model string, items [][]api.Tensor) ([][]api.Tensor, Timing, error) {
	return c.InferLocal(ctx, model, items, Locality{})
}

// Locality is what one call does with the backend's held tensors
// (docs/locality.md, Cloudflow's dynamic dispatch with caching).
type Locality struct {
	// Backend is the backend's placement id: an input the backend holds
	// (api.Tensor.HeldOn(Backend)) is named by its key instead of sent.
	// "": every byte is sent.
	Backend string
	// HoldPrefix, when not "", asks the backend to keep every item's outputs
	// of at least HoldMin bytes (ParamHold); the outputs it kept come back
	// with Held set (Backend, their key, their size).
	HoldPrefix string
	HoldMin    int
}

// InferLocal is InferTimed with locality: inputs held on loc.Backend are
// named, not sent, and outputs are held when loc.HoldPrefix asks. Errors are
// Infer's, and ErrHeldMissing when the backend no longer holds an input
// named (nothing ran: call again with a zero Locality to send the bytes).
func (c *Client) InferLocal(ctx context.Context, model string, items [][]api.Tensor, loc Locality) ([][]api.Tensor, Timing, error) {
	req, rows, err := stackItems(model, items, loc.Backend)
	if err != nil {
		return nil, Timing{}, fmt.Errorf("backend %s: model %q: %w: %v", c.addr, model, ErrInvalidInput, err)
	}
	if loc.HoldPrefix != "" {
		req.Parameters = map[string]*inference.InferParameter{ParamHold: {ParameterChoice: &inference.InferParameter_StringParam{StringParam: holdValue(loc, rows)}}}
	}
	resp, err := c.stub.ModelInfer(ctx, req)
	if err != nil {
		return nil, Timing{}, fromStatus(ctx, c.addr, fmt.Sprintf("model %q", model), err)
	}
	if len(rows) == 1 && resp.GetParameters()[ParamFanOut].GetBoolParam() {
		rows[0] = -1 // a fan-out model: the one item gets every row
	}
	out, err := splitOutputs(resp, rows)
	if err != nil {
		return nil, Timing{}, fmt.Errorf("backend %s: model %q: %w: %v", c.addr, model, ErrBackendBadResponse, err)
	}
	if loc.HoldPrefix != "" && resp.GetParameters()[ParamHeld].GetBoolParam() {
		markHeld(out, loc)
	}
	return out, responseTiming(resp), nil
}

// holdValue is ParamHold's value for a call whose items have rows.
func holdValue(loc Locality, rows []int64) string {
	b := make([]byte, 0, len(loc.HoldPrefix)+16)
	b = append(b, loc.HoldPrefix...)
	b = append(b, ';')
	b = strconv.AppendInt(b, int64(loc.HoldMin), 10)
	if !slices.ContainsFunc(rows, func(k int64) bool { return k != 1 }) {
		return string(b) // one row an item: the backend's default
	}
	b = append(b, ';')
	for i, k := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, k, 10)
	}
	return string(b)
}

// markHeld sets Held on the outputs the backend kept: the same rule as the
// backend's (at least HoldMin bytes, not empty), one allocation for the lot.
func markHeld(out [][]api.Tensor, loc Locality) {
	n := 0
	for _, item := range out {
		for j := range item {
			if l := len(item[j].Data); l > 0 && l >= loc.HoldMin {
				n++
			}
		}
	}
	held := make([]api.Held, 0, n)
	for i, item := range out {
		for j := range item {
			if l := len(item[j].Data); l > 0 && l >= loc.HoldMin {
				held = append(held, api.Held{Backend: loc.Backend, Key: HeldKey(loc.HoldPrefix, i, j), Size: l})
				item[j].Held = &held[len(held)-1]
			}
		}
	}
}

// stackItems builds one ModelInferRequest from items and returns each item's
// row count. An input an item holds on backend (api.Tensor.HeldOn) is named
// in the tensor's ParamRefs instead of stacked.
func stackItems(model string, items [][]api.Tensor, backend string) (*inference.ModelInferRequest, []int64, error) {
	if len(items) == 0 {
		return nil, nil, errors.New("no items")
	}
	first := items[0]
	if len(first) == 0 {
		return nil, nil, errors.New("item 0 has no inputs")
	}
	rows := make([]int64, len(items))
	sizes := make([]int, len(first))
	var refs []bool // refs[j]: input j names a held tensor of some item
	for i, item := range items {
		if err := api.CanBatch(first, item); err != nil {
			return nil, nil, fmt.Errorf("item %d against item 0: %w", i, err)
		}
		var err error
		if rows[i], err = api.Rows(item); err != nil {
			return nil, nil, fmt.Errorf("item %d: %w", i, err)
		}
		for j := range item {
			if err := item[j].Validate(); err != nil {
				return nil, nil, fmt.Errorf("item %d: %w", i, err)
			}
			if item[j].HeldOn(backend) != "" {
				if refs == nil {
					refs = make([]bool, len(first))
				}
				refs[j] = true
				continue
			}
			sizes[j] += len(item[j].Data)
		}
	}
	var total int64
	for _, k := range rows {
		total += k
	}
	req := &inference.ModelInferRequest{
		ModelName:        model,
		Inputs:           make([]*inference.ModelInferRequest_InferInputTensor, len(first)),
		RawInputContents: make([][]byte, len(first)),
	}
	tensors := make([]inference.ModelInferRequest_InferInputTensor, len(first))
	for j := range first {
		shape := make([]int64, len(first[j].Shape))
		copy(shape, first[j].Shape)
		shape[0] = total
		tensors[j].Name, tensors[j].Datatype, tensors[j].Shape = first[j].Name, first[j].Datatype, shape
		req.Inputs[j] = &tensors[j]
		if refs != nil && refs[j] {
			req.RawInputContents[j], tensors[j].Parameters = referenced(items, j, backend, sizes[j])
			continue
		}
		if len(items) == 1 {
			req.RawInputContents[j] = first[j].Data // nothing to stack: no copy
			continue
		}
		buf := make([]byte, 0, sizes[j])
		for _, item := range items {
			buf = append(buf, item[j].Data...)
		}
		req.RawInputContents[j] = buf
	}
	return req, rows, nil
}

// referenced stacks input j of items for a backend that holds some of them:
// the inline items' bytes (size in all), and ParamRefs naming every item in
// order.
func referenced(items [][]api.Tensor, j int, backend string, size int) ([]byte, map[string]*inference.InferParameter) {
	buf := make([]byte, 0, size)
	var refs []byte
	for i, item := range items {
		if i > 0 {
			refs = append(refs, ',')
		}
		if key := item[j].HeldOn(backend); key != "" {
			refs = append(refs, '@')
			refs = append(refs, key...)
			continue
		}
		refs = strconv.AppendInt(refs, int64(len(item[j].Data)), 10)
		buf = append(buf, item[j].Data...)
	}
	return buf, map[string]*inference.InferParameter{ParamRefs: {ParameterChoice: &inference.InferParameter_StringParam{StringParam: string(refs)}}}
}

// splitOutputs checks resp and cuts every output into the items' rows. rows
// [-1] (a fan-out answer) gives the one item all rows of every output, which
// must agree on dimension 0.
func splitOutputs(resp *inference.ModelInferResponse, rows []int64) ([][]api.Tensor, error) {
	outs := resp.GetOutputs()
	raw := resp.GetRawOutputContents()
	if len(outs) == 0 {
		return nil, errors.New("response has no outputs")
	}
	if len(raw) != 0 && len(raw) != len(outs) {
		return nil, fmt.Errorf("response has %d outputs but %d raw_output_contents", len(outs), len(raw))
	}
	var total int64
	for _, k := range rows {
		total += k
	}
	fanOut := len(rows) == 1 && rows[0] < 0
	result := make([][]api.Tensor, len(rows))
	backing := make([]api.Tensor, len(rows)*len(outs))
	for i := range result {
		result[i] = backing[i*len(outs) : (i+1)*len(outs) : (i+1)*len(outs)]
	}
	var offsets []int
	for j, o := range outs {
		t := api.Tensor{Name: o.GetName(), Datatype: o.GetDatatype(), Shape: o.GetShape()}
		switch {
		case len(raw) != 0:
			t.Data = raw[j]
		case o.GetContents() != nil:
			data, err := contentsToRaw(t.Datatype, o.GetContents())
			if err != nil {
				return nil, fmt.Errorf("output %q: %v", t.Name, err)
			}
			t.Data = data
		default:
			return nil, fmt.Errorf("output %q has no data (neither raw_output_contents nor contents)", t.Name)
		}
		if err := t.Validate(); err != nil {
			return nil, err
		}
		if fanOut && len(t.Shape) > 0 && j == 0 {
			total, rows[0] = t.Shape[0], t.Shape[0]
		}
		if len(t.Shape) == 0 || t.Shape[0] != total {
			if fanOut {
				return nil, fmt.Errorf("output %q has shape %v; a fan-out answer's outputs must agree on dimension 0 (%d rows)", t.Name, t.Shape, total)
			}
			return nil, fmt.Errorf("output %q has shape %v; want %d rows in dimension 0, one per input row", t.Name, t.Shape, total)
		}
		var err error
		offsets, err = t.RowOffsets(offsets[:0])
		if err != nil {
			return nil, err
		}
		// One shape backing per output: every item's shape is the output's with
		// its own row count.
		rank := len(t.Shape)
		shapes := make([]int64, rank*len(rows))
		var row int64
		for i, k := range rows {
			s := shapes[i*rank : (i+1)*rank : (i+1)*rank]
			copy(s, t.Shape)
			s[0] = k
			lo, hi := offsets[row], offsets[row+k]
			result[i][j] = api.Tensor{Name: t.Name, Datatype: t.Datatype, Shape: s, Data: t.Data[lo:hi:hi]}
			row += k
		}
	}
	return result, nil
}

// Pool keeps one Client per backend address, created on first use and reused
// by every caller. Client is lock-free on hits (an immutable map snapshot);
// callers on the request path should still keep the *Client they got.
type Pool struct {
	opts    ClientOptions
	mu      sync.Mutex // serializes adding and closing
	clients atomic.Pointer[map[string]*Client]
	closed  bool
	tlsAt   map[string]bool // addresses dialled over TLS (UseTLS); under mu
	// tls is the config of UseTLS's addresses: SetTLS's, else the
	// system's roots.
	tls *tls.Config
}

// SetTLS sets the TLS config of the clients of the addresses UseTLS names
// (the CA the backends' certificates are verified with); nil: the system's
// roots. Call it before the first UseTLS.
func (p *Pool) SetTLS(cfg *tls.Config) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tls = cfg
}

// UseTLS makes the clients of addr dial over TLS (a backend whose config
// entry or Consul meta says tls). A plain-text client already made for addr
// is closed and made again.
func (p *Pool) UseTLS(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tlsAt[addr] {
		return
	}
	if p.tlsAt == nil {
		p.tlsAt = map[string]bool{}
	}
	p.tlsAt[addr] = true
	old := *p.clients.Load()
	if c, ok := old[addr]; ok {
		next := make(map[string]*Client, len(old))
		for k, v := range old {
			if k != addr {
				next[k] = v
			}
		}
		p.clients.Store(&next)
		c.Close()
	}
}

// Addrs returns the addresses the pool holds a client for, sorted.
func (p *Pool) Addrs() []string {
	m := *p.clients.Load()
	out := make([]string, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// NewPool returns an empty Pool whose clients use opts.
func NewPool(opts ClientOptions) *Pool {
	p := &Pool{opts: opts}
	empty := map[string]*Client{}
	p.clients.Store(&empty)
	return p
}

// ErrPoolClosed is returned by Pool.Client after Close.
var ErrPoolClosed = errors.New("backend client pool is closed")

// Client returns the pooled Client for addr, creating it on first use.
func (p *Pool) Client(addr string) (*Client, error) {
	if c, ok := (*p.clients.Load())[addr]; ok {
		return c, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolClosed
	}
	old := *p.clients.Load()
	if c, ok := old[addr]; ok {
		return c, nil
	}
	opts := p.opts
	if p.tlsAt[addr] {
		opts.TLS = p.tls
		if opts.TLS == nil {
			opts.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	c, err := NewClient(addr, opts)
	if err != nil {
		return nil, err
	}
	next := make(map[string]*Client, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[addr] = c
	p.clients.Store(&next)
	return c, nil
}

// Remove closes and forgets the Client for addr (a backend that left).
func (p *Pool) Remove(addr string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.clients.Load()
	c, ok := old[addr]
	if !ok {
		return nil
	}
	next := make(map[string]*Client, len(old))
	for k, v := range old {
		if k != addr {
			next[k] = v
		}
	}
	p.clients.Store(&next)
	return c.Close()
}

// Close closes every Client; later Client calls return ErrPoolClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var errs []error
	for _, c := range *p.clients.Load() {
		errs = append(errs, c.Close())
	}
	empty := map[string]*Client{}
	p.clients.Store(&empty)
	return errors.Join(errs...)
}
