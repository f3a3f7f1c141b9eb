package dataplane

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/backends"
)

// Locality (Cloudflow's dynamic dispatch with caching; docs/locality.md).
// With LiveOptions.Locality, a module whose outputs feed another module asks
// the backend running each batch to hold the outputs of at least that many
// bytes (backends.Locality.HoldPrefix); the outputs come back marked
// (api.Tensor.Held). A later batch sent to that backend names them instead
// of sending them (the client's stackItems), and its dispatcher prefers a
// free machine on the backend holding its items (dispatcher.Item.Home,
// dispatcher.Options.Locality). The gateway keeps its own copy of every
// output: a backend that has dropped one answers ErrHeldMissing, and the
// call is sent again with the bytes (infer).

// holdID names this process among the gateways that may share a backend: 8
// random bytes, hex. A key is holdID.<call>/<item>/<output>.
var holdID = newHoldID()

// holdSeq numbers this process's calls that hold outputs.
var holdSeq atomic.Uint64

func newHoldID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// holdPrefix returns a key prefix no other call uses: holdID.<sequence>.
func holdPrefix() string {
	b := make([]byte, 0, len(holdID)+14)
	b = append(b, holdID...)
	b = append(b, '.')
	b = strconv.AppendUint(b, holdSeq.Add(1), 36)
	return string(b)
}

// locality is what a call of lm's to backend does with held tensors: name
// those held there (with LiveOptions.Locality on) and, for a module whose
// outputs feed another, hold its outputs of at least lm.holdMin bytes.
func (lm *liveModule) locality(backend string) backends.Locality {
	if !lm.local {
		return backends.Locality{}
	}
	loc := backends.Locality{Backend: backend}
	if lm.holdMin > 0 {
		loc.HoldPrefix, loc.HoldMin = holdPrefix(), lm.holdMin
	}
	return loc
}

// homeOf returns the backend holding the first held input of inputs, "" for
// none: where the item's batch is best run (dispatcher.Item.Home).
func homeOf(inputs []api.Tensor) string {
	for i := range inputs {
		if h := inputs[i].Held; h != nil && h.Size == len(inputs[i].Data) {
			return h.Backend
		}
	}
	return ""
}
