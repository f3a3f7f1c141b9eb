package dataplane

import (
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/dispatcher"
)

// lateEvery bounds the late-batch log to one line a second per Health (one
// gateway): when the plan holds, a batch answered after its oldest item's
// deadline is rare and the line says why one was; under overload every
// batch may be late, and the requests' own 504 lines and the metrics count
// them already. The lines left out are counted in the next one.
const lateEvery = time.Second

// noteLate logs a batch answered (at end) after the request deadline of its
// item first (oldest): how long that item waited in the module's queue and
// how much of its module budget was left when the batch was sent, what the
// dispatcher expected of the machine it chose and what the machine did, so
// that a 504 can be traced to its batch, and, when the backend reports its
// times, how much of the round trip it spent queueing and computing. The
// backend is the one the batch was sent to first (a retry may have moved
// it); err is the call's error, if any. Times run from b.Sent, when the
// dispatcher handed the batch over. Called from the batch's goroutine
// (liveModule.send); per late batch, one CAS and at most one line a second.
func (lm *liveModule) noteLate(b *dispatcher.Batch, first *dispatcher.Item, end, oldest time.Time, err error) {
	start := b.Sent
	h := lm.h
	if h == nil {
		return
	}
	now, last := end.UnixNano(), h.lateLogged.Load()
	if now-last < int64(lateEvery) || !h.lateLogged.CompareAndSwap(last, now) {
		h.lateLeftOut.Add(1)
		return
	}
	fields := []zap.Field{
		zap.String("session", lm.session), zap.String("module", lm.name), zap.String("backend", b.Slot.Backend),
		zap.Int("items", len(b.Items)), zap.Int("dummies", b.Dummies), zap.Int("batch", b.Slot.Batch),
		zap.Duration("planned", b.Slot.Duration), zap.Duration("queued_on_device", b.Wait()),
		zap.Duration("took", end.Sub(start)), zap.Duration("slack_at_send", oldest.Sub(start)),
		zap.Duration("waited_in_module", start.Sub(first.Arrival)), zap.Duration("module_deadline_at_send", first.Deadline.Sub(start)),
		zap.Duration("late_by", end.Sub(oldest)), zap.Uint64("left_out_before", h.lateLeftOut.Swap(0)),
		zap.Error(err), // a batch cut at its last request's deadline ends late too
	}
	if bh := lm.health[b.Slot.Backend]; bh != nil {
		fields = append(fields, zap.Float64("pace", math.Float64frombits(bh.paceRatio.Load())),
			zap.Float64("straggler_ratio", math.Float64frombits(bh.ratio.Load())))
		if q, c := time.Duration(bh.lastQueue.Load()), time.Duration(bh.lastCompute.Load()); q+c > 0 && err == nil {
			// What the backend said of its latest answer (this batch's, unless
			// another answered between): took far above them is the network
			// and the hosts (a CPU-starved gateway or backend process), not
			// the device.
			fields = append(fields, zap.Duration("backend_queue", q), zap.Duration("backend_compute", c),
				zap.Duration("network_and_host", end.Sub(start)-q-c))
		}
	}
	h.log.Warn("batch answered after its oldest item's deadline", fields...)
}
