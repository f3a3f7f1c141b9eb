package kserve

import (
	"bytes"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/gateway"
)

// ExtensionStatistics is the name server metadata lists for the statistics
// extension (Triton's, which KServe's Open Inference Protocol adopted):
// GET /v2/models[/{session}[/versions/{v}]]/stats and the ModelStatistics RPC.
const ExtensionStatistics = "statistics"

// duration is one of the statistics extension's cumulative figures: how many
// times something happened and its total duration in nanoseconds.
type duration struct {
	count atomic.Uint64
	ns    atomic.Uint64
}

func (d *duration) add(ns uint64) {
	d.count.Add(1)
	d.ns.Add(ns)
}

// sessionStats are one session's cumulative statistics since the server
// started, in the statistics extension's terms. Every field is an atomic
// counter: the request path adds to them without a lock.
//
//   - success, fail: requests answered 200, and the others, with the time from
//     the request's arrival at the handler to its answer.
//   - queue, compute: per successful request, the time its items waited in
//     the modules' queues and ran on the backends, summed over the modules
//     that ran (the piccolo.<module>.queue_ms and .compute_ms it answers; a
//     fan-out module counts its slowest item).
//   - lastInference: when the last successful request was answered, in ms
//     since the Unix epoch.
//   - doorShed: HTTP infer requests the door refused before reading them
//     (not a statistics-extension figure: piccolo_gateway_door_shed_total's
//     session label, Server.OverloadStats).
type sessionStats struct {
	success, fail, queue, compute duration
	lastInference                 atomic.Int64
	doorShed                      atomic.Uint64
}

// stats holds every session's statistics. The table is an immutable map
// swapped whole when a session is first seen (copy on write under mu, off the
// steady state), so the request path reads it with one atomic load.
type stats struct {
	table atomic.Pointer[map[string]*sessionStats]
	mu    sync.Mutex // writers of table
}

// of returns session's statistics, creating them the first time; nil for a
// name the runner does not serve (so a client cannot grow the table).
func (st *stats) of(exec *gateway.DAGRunner, session string) *sessionStats {
	if t := st.table.Load(); t != nil {
		if ss, ok := (*t)[session]; ok {
			return ss
		}
	}
	if _, ok := exec.Session(session); !ok {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	old := st.table.Load()
	if old != nil {
		if ss, ok := (*old)[session]; ok {
			return ss
		}
	}
	t := make(map[string]*sessionStats, 1)
	if old != nil {
		for k, v := range *old {
			t[k] = v
		}
	}
	ss := new(sessionStats)
	t[session] = ss
	st.table.Store(&t)
	return ss
}

// countShed counts an HTTP infer request the door refused in its session's
// doorShed, read from the path (/v2/models/{session}/...) without decoding
// anything: only a session already in the table (one request of it was
// answered since the start) is counted, so a client cannot grow it, and
// nothing allocates. false: not counted (the door's total still has it).
func (st *stats) countShed(path []byte) bool {
	t := st.table.Load()
	if t == nil || !bytes.HasPrefix(path, prefModels) {
		return false
	}
	name := path[len(prefModels):]
	if i := bytes.IndexByte(name, '/'); i >= 0 {
		name = name[:i]
	}
	ss := (*t)[string(name)] // no allocation: the compiler's map-index case
	if ss == nil {
		return false
	}
	ss.doorShed.Add(1)
	return true
}

// shedBySession returns each session's doorShed, those above 0.
func (st *stats) shedBySession() map[string]uint64 {
	t := st.table.Load()
	if t == nil {
		return nil
	}
	var out map[string]uint64
	for name, ss := range *t {
		if n := ss.doorShed.Load(); n > 0 {
			if out == nil {
				out = map[string]uint64{}
			}
			out[name] = n
		}
	}
	return out
}

// observe counts one request to session answered with status after took, and
// on success its modules' queue and compute times from resp's parameters.
func (st *stats) observe(exec *gateway.DAGRunner, session string, status int, took time.Duration, resp *gateway.InferResponse) {
	ss := st.of(exec, session)
	if ss == nil {
		return
	}
	if status != 200 {
		ss.fail.add(uint64(took))
		return
	}
	ss.success.add(uint64(took))
	if resp != nil {
		ss.queue.add(uint64(max(resp.Queue, 0)))
		ss.compute.add(uint64(max(resp.Compute, 0)))
	}
	ss.lastInference.Store(time.Now().UnixMilli())
}

// modelStatistics returns the statistics of session, or of every session the
// runner serves when session is "", in the RPC's message (the HTTP answer is
// its JSON). An unknown session or version is an error matching
// ErrUnknownSession or errUnknownVersion.
func (s *Server) modelStatistics(session, version string) (*inference.ModelStatisticsResponse, error) {
	names := []string{session}
	if session == "" {
		if version != "" {
			return nil, gateway.Public(errUnknownVersion, "a version needs a session: /v2/models/{session}/versions/{v}/stats")
		}
		names = s.exec.Sessions()
	} else if err := s.exec.CheckSession(session); err != nil {
		return nil, err
	} else if err := s.checkVersion(session, version); err != nil {
		return nil, err
	}
	out := &inference.ModelStatisticsResponse{ModelStats: make([]*inference.ModelStatistics, 0, len(names))}
	for _, name := range names {
		ms := &inference.ModelStatistics{Name: name, Version: SessionVersion, InferenceStats: &inference.InferStatistics{
			Success: &inference.StatisticDuration{}, Fail: &inference.StatisticDuration{}, Queue: &inference.StatisticDuration{},
			ComputeInput: &inference.StatisticDuration{}, ComputeInfer: &inference.StatisticDuration{}, ComputeOutput: &inference.StatisticDuration{},
		}}
		if ss := s.stats.of(s.exec, name); ss != nil {
			is := ms.InferenceStats
			is.Success.Count, is.Success.Ns = ss.success.count.Load(), ss.success.ns.Load()
			is.Fail.Count, is.Fail.Ns = ss.fail.count.Load(), ss.fail.ns.Load()
			is.Queue.Count, is.Queue.Ns = ss.queue.count.Load(), ss.queue.ns.Load()
			is.ComputeInfer.Count, is.ComputeInfer.Ns = ss.compute.count.Load(), ss.compute.ns.Load()
			ms.LastInference = uint64(max(0, ss.lastInference.Load()))
			ms.InferenceCount = is.Success.Count
			ms.ExecutionCount = is.Success.Count
		}
		out.ModelStats = append(out.ModelStats, ms)
	}
	return out, nil
}

// appendStatsJSON writes r as the statistics extension's HTTP answer:
// {"model_stats": [{"name", "version", "last_inference", "inference_count",
// "execution_count", "inference_stats": {"success": {"count", "ns"}, "fail",
// "queue", "compute_input", "compute_infer", "compute_output"},
// "batch_stats": []}]}.
func appendStatsJSON(b []byte, r *inference.ModelStatisticsResponse) []byte {
	b = append(b, `{"model_stats":[`...)
	for i, ms := range r.ModelStats {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, ms.Name)
		b = append(b, `,"version":`...)
		b = appendString(b, ms.Version)
		b = append(b, `,"last_inference":`...)
		b = strconv.AppendUint(b, ms.LastInference, 10)
		b = append(b, `,"inference_count":`...)
		b = strconv.AppendUint(b, ms.InferenceCount, 10)
		b = append(b, `,"execution_count":`...)
		b = strconv.AppendUint(b, ms.ExecutionCount, 10)
		is := ms.InferenceStats
		b = append(b, `,"inference_stats":{`...)
		for j, d := range []struct {
			name string
			d    *inference.StatisticDuration
		}{{"success", is.Success}, {"fail", is.Fail}, {"queue", is.Queue}, {"compute_input", is.ComputeInput}, {"compute_infer", is.ComputeInfer}, {"compute_output", is.ComputeOutput}} {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, d.name...)
			b = append(b, `":{"count":`...)
			b = strconv.AppendUint(b, d.d.GetCount(), 10)
			b = append(b, `,"ns":`...)
			b = strconv.AppendUint(b, d.d.GetNs(), 10)
			b = append(b, '}')
		}
		b = append(b, `},"batch_stats":[]}`...)
	}
	return append(b, "]}"...)
}

// repositoryIndex lists the sessions as the repository extension's index
// does: each with its version and state, READY while the server is ready,
// else UNAVAILABLE (a session the planner could not plan is listed READY
// too, as ModelReady answers: docs/protocol.md). readyOnly drops the
// unavailable ones.
func (s *Server) repositoryIndex(readyOnly bool) []*inference.RepositoryIndexResponse_ModelIndex {
	ready := s.ready.Load()
	var out []*inference.RepositoryIndexResponse_ModelIndex
	for _, name := range s.exec.Sessions() {
		m := &inference.RepositoryIndexResponse_ModelIndex{Name: name, Version: SessionVersion, State: "READY"}
		if !ready {
			if readyOnly {
				continue
			}
			m.State, m.Reason = "UNAVAILABLE", "the gateway is not ready"
		}
		out = append(out, m)
	}
	return out
}

// appendIndexJSON writes the index as the repository extension's HTTP answer:
// [{"name", "version", "state", "reason"}, ...].
func appendIndexJSON(b []byte, idx []*inference.RepositoryIndexResponse_ModelIndex) []byte {
	b = append(b, '[')
	for i, m := range idx {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, m.Name)
		b = append(b, `,"version":`...)
		b = appendString(b, m.Version)
		b = append(b, `,"state":`...)
		b = appendString(b, m.State)
		if m.Reason != "" {
			b = append(b, `,"reason":`...)
			b = appendString(b, m.Reason)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// decodeIndexRequest reads the repository index request's optional body,
// {"ready": true|false} (other keys, such as "repository_name", are allowed
// and ignored: the gateway has one repository, its sessions); it returns
// "ready".
func decodeIndexRequest(body []byte) (bool, error) {
	s := scanner{b: body}
	if s.peek() == 0 {
		return false, nil
	}
	if s.peek() != '{' {
		return false, s.errf("want a JSON object: {\"ready\": true|false}")
	}
	s.i++
	var seen keySet
	ready := false
	for first := true; ; first = false {
		ok, err := s.more('}', first)
		if err != nil {
			return false, err
		}
		if !ok {
			break
		}
		k, err := s.key(&seen)
		if err != nil {
			return false, err
		}
		if s.null() {
			continue
		}
		if string(k) == "ready" {
			if ready, err = boolParam(&s, "\"ready\""); err != nil {
				return false, err
			}
			continue
		}
		if err := s.skip(1); err != nil {
			return false, err
		}
	}
	if s.peek() != 0 {
		return false, s.errf("trailing data after the JSON object")
	}
	return ready, nil
}
