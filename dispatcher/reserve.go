package dispatcher

import "time"

// Stage is one module's dispatcher in its session's DAG, with the stages
// after it: what an item at the module must leave time for. The gateway
// and the simulator build one per module when they build a plan's
// dispatchers; immutable after.
type Stage struct {
	D    *Dispatcher
	Next []*Stage
}

// Reserve returns the time the modules after s need, as their queues are
// now: the longest path from s's Next to a sink, each module weighing its
// dispatcher's Lag(now) (its wait for a lane plus a batch's duration). An
// item at s that finishes by the request's deadline less Reserve leaves
// the rest of the DAG what its queues say it needs (Item.SetDeadlines).
// Lock-free: two atomic loads per module on the path; for the small DAGs
// of a session (it walks every path, without memo).
func (s *Stage) Reserve(now time.Time) time.Duration {
	var worst time.Duration
	for _, n := range s.Next {
		worst = max(worst, n.D.Lag(now)+n.Reserve(now))
	}
	return worst
}
