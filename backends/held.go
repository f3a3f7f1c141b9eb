package backends

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/api/inference"
)

// Locality (Cloudflow's dynamic dispatch with caching, docs/locality.md): a
// gateway may ask a backend to keep the outputs of a batch it runs, and name
// them in a later call to the same backend instead of sending their bytes
// again. The gateway keeps its own copy of every output (it answers the client
// and retries elsewhere with it), so a missing copy costs one more call with
// the bytes, never a request.
//
//   - ParamHold, a request parameter (string): "<prefix>;<min bytes>" or
//     "<prefix>;<min bytes>;<rows of item 0>,<rows of item 1>,…" (the rows
//     default to one per item; a fan-out model's one item has every output
//     row). Output j of item i is kept under the key "<prefix>/<i>/<j>" when
//     its bytes are at least min bytes.
//   - ParamHeld, a response parameter (bool): true when every output that
//     qualified was kept (a backend that keeps nothing, or could not keep them
//     all within its memory, answers false or nothing: the gateway then treats
//     none as held).
//   - ParamRefs, an input tensor's parameter (string): the items of that
//     input, in order, each "<bytes>" (that many bytes next in the tensor's
//     raw contents) or "@<key>" (the bytes the backend keeps under key); the
//     raw contents hold the inline items only. An unknown or expired key
//     fails the call with ErrHeldMissing (gRPC ABORTED): send it again with
//     the bytes.
const (
	ParamHold = "piccolo_hold"
	ParamHeld = "piccolo_held"
	ParamRefs = "piccolo_refs"
)

// ErrHeldMissing: a request named a held tensor (ParamRefs) the backend does
// not keep (never held, evicted or expired). gRPC ABORTED. Nothing ran; the
// caller sends the call again with the bytes.
var ErrHeldMissing = errors.New("held tensor missing")

// DefaultHoldTTL is how long a backend keeps a held tensor (ServerOptions.HoldTTL):
// long enough for the next modules of a request and their retries, whose
// SLOs are seconds at most.
const DefaultHoldTTL = 10 * time.Second

// MaxHoldPrefix bounds ParamHold's prefix, in bytes: the gateway's are 30
// at most (holdPrefix), and keys are not counted in the store's bound.
const MaxHoldPrefix = 128

// heldStore is a backend's held tensors (Cloudflow's cache at an executor):
// at most max bytes, each kept ttl, the oldest dropped first when a new batch
// needs room. A hand-written LRU-by-insertion with a byte bound and an
// expiry, because the entries are written once and never refreshed: a list
// in insertion order is the eviction order, which no library cache here
// bounds by bytes. Safe for concurrent use (one mutex; a batch takes it once
// to hold its outputs, and once per referenced item to read).
type heldStore struct {
	max   int64
	ttl   time.Duration
	now   func() time.Time
	gauge prometheus.Gauge // the bytes held; nil: none

	mu     sync.Mutex
	bytes  int64
	byKey  map[string]*heldEntry
	oldest *heldEntry // insertion order: oldest → newest through next
	newest *heldEntry
}

type heldEntry struct {
	key        string
	t          api.Tensor // its own copy of the bytes
	expires    time.Time
	prev, next *heldEntry
}

func newHeldStore(maxBytes int64, ttl time.Duration, gauge prometheus.Gauge) *heldStore {
	if ttl <= 0 {
		ttl = DefaultHoldTTL
	}
	return &heldStore{max: maxBytes, ttl: ttl, now: time.Now, gauge: gauge, byKey: map[string]*heldEntry{}}
}

// put keeps the tensors under their keys, all or none: none when together
// they exceed the store's bound. It drops expired entries, then the oldest,
// to make room. The tensors' Data is copied.
func (s *heldStore) put(keys []string, ts []api.Tensor) bool {
	if len(ts) == 0 {
		return true // nothing qualified: all of it is kept
	}
	var need int64
	for i := range ts {
		need += int64(len(ts[i].Data))
	}
	if need > s.max {
		return false
	}
	copies := make([]heldEntry, len(ts))
	data := make([]byte, need) // one allocation for the batch's copies
	now := s.now()
	for i := range ts {
		n := copy(data, ts[i].Data)
		t := ts[i]
		t.Data, t.Held, t.Shape = data[:n:n], nil, append([]int64(nil), t.Shape...)
		data = data[n:]
		copies[i] = heldEntry{key: keys[i], t: t, expires: now.Add(s.ttl)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for e := s.oldest; e != nil && (s.bytes+need > s.max || !e.expires.After(now)); e = s.oldest {
		s.unlinkLocked(e)
	}
	for i := range copies {
		e := &copies[i]
		if old := s.byKey[e.key]; old != nil {
			s.unlinkLocked(old)
		}
		s.byKey[e.key] = e
		s.bytes += int64(len(e.t.Data))
		e.prev = s.newest
		if s.newest != nil {
			s.newest.next = e
		} else {
			s.oldest = e
		}
		s.newest = e
	}
	if s.gauge != nil {
		s.gauge.Set(float64(s.bytes))
	}
	return true
}

func (s *heldStore) unlinkLocked(e *heldEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.oldest = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.newest = e.prev
	}
	e.prev, e.next = nil, nil
	delete(s.byKey, e.key)
	s.bytes -= int64(len(e.t.Data))
	if s.gauge != nil {
		s.gauge.Set(float64(s.bytes))
	}
}

// get returns the tensor kept under key (its Data the store's: read only), or
// false when none is, or it has expired.
func (s *heldStore) get(key string) (api.Tensor, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byKey[key]
	if e == nil || !e.expires.After(s.now()) {
		return api.Tensor{}, false
	}
	return e.t, true
}

// holdRequest is a parsed ParamHold.
type holdRequest struct {
	prefix string
	min    int
	rows   []int64 // nil: one row per item
}

// parseHold reads ParamHold's value; errors name what is wrong.
func parseHold(v string) (holdRequest, error) {
	parts := strings.Split(v, ";")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return holdRequest{}, fmt.Errorf("parameter %s is %q; want \"<prefix>;<min bytes>[;<rows>,…]\"", ParamHold, v)
	}
	if len(parts[0]) > MaxHoldPrefix {
		return holdRequest{}, fmt.Errorf("parameter %s: prefix of %d bytes; at most %d (a key is kept per held output, beside its bytes)", ParamHold, len(parts[0]), MaxHoldPrefix)
	}
	if strings.ContainsAny(parts[0], ",@") {
		return holdRequest{}, fmt.Errorf("parameter %s: prefix %q has ',' or '@'; a key may not (%s lists keys after '@', separated by ',')", ParamHold, parts[0], ParamRefs)
	}
	h := holdRequest{prefix: parts[0]}
	var err error
	if h.min, err = strconv.Atoi(parts[1]); err != nil || h.min < 0 {
		return holdRequest{}, fmt.Errorf("parameter %s: min bytes %q is not an integer ≥ 0", ParamHold, parts[1])
	}
	if len(parts) == 3 {
		for _, r := range strings.Split(parts[2], ",") {
			k, err := strconv.ParseInt(r, 10, 64)
			if err != nil || k < 0 {
				return holdRequest{}, fmt.Errorf("parameter %s: item rows %q is not an integer ≥ 0", ParamHold, r)
			}
			h.rows = append(h.rows, k)
		}
	}
	return h, nil
}

// hold keeps the outputs of a batch of n input rows that qualify under h
// (fanOut: the one item has every output row). It returns whether every
// qualifying output was kept.
func (s *heldStore) hold(h holdRequest, outputs []api.Tensor, n int, fanOut bool) bool {
	rows := h.rows
	if fanOut {
		rows = []int64{-1}
	} else if rows == nil {
		rows = make([]int64, n)
		for i := range rows {
			rows[i] = 1
		}
	}
	var keys []string
	var ts []api.Tensor
	var offsets []int
	for j := range outputs {
		t := &outputs[j]
		var err error
		if offsets, err = t.RowOffsets(offsets[:0]); err != nil {
			return false
		}
		var row int64
		for i, k := range rows {
			if k < 0 {
				k = int64(len(offsets) - 1)
			}
			if row+k >= int64(len(offsets)) {
				return false // rows that do not add up to the output's: keep nothing
			}
			lo, hi := offsets[row], offsets[row+k]
			row += k
			if hi-lo < h.min || hi == lo {
				continue
			}
			shape := append([]int64(nil), t.Shape...)
			shape[0] = k
			keys = append(keys, HeldKey(h.prefix, i, j))
			ts = append(ts, api.Tensor{Name: t.Name, Datatype: t.Datatype, Shape: shape, Data: t.Data[lo:hi]})
		}
	}
	return s.put(keys, ts)
}

// HeldKey is the key output j of item i of a batch held under prefix is kept
// by: "<prefix>/<i>/<j>".
func HeldKey(prefix string, i, j int) string {
	return prefix + "/" + strconv.Itoa(i) + "/" + strconv.Itoa(j)
}

// resolveRefs rebuilds the data of input t from its ParamRefs value and the
// inline bytes raw: the items in order, inline ones from raw, held ones from
// the store. It returns the bytes taken from the store. The rebuilt data may
// not exceed what t's shape needs (MaxMessageBytes for BYTES), so a value
// naming one held tensor many times costs no more than its bytes. Errors
// wrap ErrHeldMissing for a key not kept, else name what is wrong with the
// value.
func (s *heldStore) resolveRefs(t *api.Tensor, refs string, raw []byte) (int, error) {
	limit := int64(MaxMessageBytes)
	if size := api.ElementSize(t.Datatype); size > 0 {
		n, err := api.NumElements(t.Shape)
		if err != nil {
			return 0, fmt.Errorf("input %q: %v", t.Name, err)
		}
		limit = n * int64(size)
	}
	held := 0
	var out []byte
	for _, item := range strings.Split(refs, ",") {
		if key, ok := strings.CutPrefix(item, "@"); ok {
			var h api.Tensor
			found := false
			if s != nil {
				h, found = s.get(key)
			}
			if !found {
				return 0, fmt.Errorf("input %q: %w: %q (not kept here, or expired)", t.Name, ErrHeldMissing, key)
			}
			if h.Datatype != t.Datatype || len(h.Shape) != len(t.Shape) || !slices.Equal(h.Shape[1:], t.Shape[1:]) {
				return 0, fmt.Errorf("input %q: held tensor %q is %s %v; the input is %s %v", t.Name, key, h.Datatype, h.Shape, t.Datatype, t.Shape)
			}
			if int64(len(out)+len(h.Data)) > limit {
				return 0, fmt.Errorf("input %q: the items of parameter %s come to more than the %d bytes its shape %v needs", t.Name, ParamRefs, limit, t.Shape)
			}
			out = append(out, h.Data...)
			held += len(h.Data)
			continue
		}
		n, err := strconv.Atoi(item)
		if err != nil || n < 0 || n > len(raw) {
			return 0, fmt.Errorf("input %q: parameter %s item %q is neither \"@<key>\" nor a byte count within the %d inline bytes left", t.Name, ParamRefs, item, len(raw))
		}
		if int64(len(out)+n) > limit {
			return 0, fmt.Errorf("input %q: the items of parameter %s come to more than the %d bytes its shape %v needs", t.Name, ParamRefs, limit, t.Shape)
		}
		out = append(out, raw[:n]...)
		raw = raw[n:]
	}
	if len(raw) != 0 {
		return 0, fmt.Errorf("input %q: %d inline bytes left after the items of parameter %s", t.Name, len(raw), ParamRefs)
	}
	t.Data = out
	return held, nil
}

// holdParam reads a request's ParamHold (ok false: none).
func holdParam(req *inference.ModelInferRequest) (_ holdRequest, ok bool, _ error) {
	p, ok := req.GetParameters()[ParamHold]
	if !ok {
		return holdRequest{}, false, nil
	}
	h, err := parseHold(p.GetStringParam())
	return h, true, err
}

// heldTrue is ParamHeld's value in a response; never mutated.
var heldTrue = &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}

// responseTensors is resp's outputs as tensors (Data aliasing the response),
// in the response's order: the order the gateway's item outputs keep.
func responseTensors(resp *inference.ModelInferResponse) []api.Tensor {
	ts := make([]api.Tensor, len(resp.Outputs))
	for j, o := range resp.Outputs {
		ts[j] = api.Tensor{Name: o.GetName(), Datatype: o.GetDatatype(), Shape: o.GetShape(), Data: resp.RawOutputContents[j]}
	}
	return ts
}
