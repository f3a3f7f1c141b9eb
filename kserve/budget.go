package kserve

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"sync/atomic"

	"github.com/piccolo-serving/piccolo/gateway"
	"github.com/piccolo-serving/piccolo/metrics"
)

// errBusy is a request refused because the in-flight bytes budget is full
// (HTTP 503 with Retry-After, gRPC RESOURCE_EXHAUSTED): memory is held by
// requests already in flight, and this one would push the gateway past what
// --max-inflight-bytes allows.
var errBusy = errors.New("busy")

// inflightBudget is the process's in-flight bytes budget: the request
// bytes (bodies as received, decompressed bodies as they inflate, decoded
// tensors as they grow) that requests being served hold, at most limit.
// Each request takes from it as its bytes arrive and gives all back when
// answered, so memory is bounded by what is in flight, not by what a client
// declares. A nil budget takes everything.
type inflightBudget struct {
	limit int64
	used  atomic.Int64
	m     *metrics.Metrics
}

// hold is one request's share of the budget; its zero value over a nil
// budget takes everything. Used on the request's goroutine only.
type hold struct {
	b *inflightBudget
	n int64
}

// take adds n bytes to the request's share, or refuses with errBusy (the
// share unchanged) when the budget cannot give them.
func (h *hold) take(n int) error {
	if h == nil {
		return nil
	}
	if err := h.b.take(n); err != nil {
		return err
	}
	h.n += int64(max(n, 0))
	return nil
}

// take takes n bytes from the budget, or refuses with errBusy; a nil budget
// takes everything.
func (b *inflightBudget) take(n int) error {
	if b == nil || n <= 0 {
		return nil
	}
	if used := b.used.Add(int64(n)); used > b.limit {
		b.used.Add(-int64(n))
		b.m.InflightRefused()
		return gateway.Public(errBusy, "%v: requests in flight hold the gateway's in-flight budget of %d bytes (--max-inflight-bytes); retry later", errBusy, b.limit)
	}
	return nil
}

// release gives the request's share back.
func (h *hold) release() {
	if h.b != nil && h.n > 0 {
		h.b.m.InflightBytes(h.b.used.Add(-h.n))
		h.n = 0
	}
}

// limitWriter collects a decompressed body: at most max bytes, each chunk
// taken from the budget before it is kept, so a compressed body takes
// memory as it inflates and stops when the budget or --max-body says. The
// caller adds taken to the request's hold (the writer escapes to the heap
// as an io.Writer; the hold, on the request's stack, must not).
type limitWriter struct {
	buf   []byte
	max   int
	b     *inflightBudget
	over  bool // max reached
	taken int  // bytes taken from b: every buffer allocated
}

func (w *limitWriter) Write(p []byte) (int, error) {
	if len(w.buf)+len(p) > w.max {
		w.over = true
		return 0, gateway.ErrTooLarge
	}
	if need := len(w.buf) + len(p); need > cap(w.buf) {
		// The new buffer is taken whole: the old one is garbage, but it is
		// memory until the collector runs, so the budget counts it too.
		c := min(max(2*cap(w.buf), need, 32<<10), w.max)
		if err := w.b.take(c); err != nil {
			return 0, err
		}
		w.taken += c
		nb := make([]byte, len(w.buf), c)
		copy(nb, w.buf)
		w.buf = nb
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// DefaultInflightFraction is the share of the container's memory limit
// (cgroup v2 memory.max, or v1 memory.limit_in_bytes) the in-flight budget
// gets by default: a fifth, so that the budget plus the collector's lag
// (the heap grows past what is live before a collection frees it; about 20%
// over the budget under eight gzip bombs, docs/security.md) stays well
// inside the limit.
const DefaultInflightFraction = 5

// DefaultInflightBytes returns the default in-flight budget: a fifth of the
// cgroup memory limit when the process has one, else 3 × maxBody (maxBody 0:
// DefaultMaxBodyBytes): room for a few requests at the body limit.
func DefaultInflightBytes(maxBody int) int64 {
	if limit := cgroupMemoryLimit(); limit > 0 {
		return limit / DefaultInflightFraction
	}
	if maxBody <= 0 {
		maxBody = DefaultMaxBodyBytes
	}
	return 3 * int64(maxBody)
}

// cgroupMemoryLimit reads the process's cgroup memory limit in bytes; 0
// when there is none (unlimited, or no cgroup file).
func cgroupMemoryLimit() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
		if err != nil || v <= 0 || v >= 1<<60 { // "max", or v1's "unlimited" page-rounded MaxInt64
			return 0
		}
		return v
	}
	return 0
}
