package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/scheduler/cluster"
)

// historyEntryMax bounds one change of the cluster's history as stored in
// Consul KV (its JSON), well under Consul's 512 KiB per value and leaving
// room in the config's own transaction: a change whose entry is larger is
// kept without its diff, then without its sessions (it can then be listed
// but not rolled back to).
const historyEntryMax = 64 << 10

// storedChange is a Change as the cluster keeps it in Consul KV
// (<prefix>/history/<version>, JSON): the Change's fields and the version's
// sessions in the config file format, which a rollback to it restores.
type storedChange struct {
	Change
	Config string `json:"config,omitempty"`
}

// encodeChange is c with cfg's sessions, as stored; trimmed to
// historyEntryMax (the diff first, then the sessions, each dropping said in
// the note).
func encodeChange(c Change, cfg *api.Config) ([]byte, error) {
	sessions, err := yaml.Marshal(struct {
		Sessions []api.Session `yaml:"sessions"`
	}{cfg.Sessions})
	if err != nil {
		return nil, err
	}
	s := storedChange{Change: c, Config: string(sessions)}
	for step := 0; ; step++ {
		b, err := json.Marshal(s)
		if err != nil || len(b) <= historyEntryMax {
			return b, err
		}
		switch step {
		case 0:
			s.Diff, s.Note = "", joinNote(s.Note, "diff not kept: too large")
		case 1:
			s.Config, s.Note = "", joinNote(s.Note, "sessions not kept: too large; no rollback to this version")
		default:
			return nil, fmt.Errorf("the history entry of version %d is %d bytes without its diff and sessions; at most %d", c.Version, len(b), historyEntryMax)
		}
	}
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// decodeChange reads one stored change; its cfg holds the version's sessions
// (nil when they were not kept).
func decodeChange(e cluster.HistoryEntry) (Change, error) {
	var s storedChange
	if err := json.Unmarshal(e.Value, &s); err != nil {
		return Change{}, err
	}
	c := s.Change
	c.Version = e.Version
	if s.Config != "" {
		var cfg api.Config
		if err := yaml.Unmarshal([]byte(s.Config), &cfg); err != nil {
			return Change{}, fmt.Errorf("its sessions: %w", err)
		}
		c.cfg = &cfg
	}
	if c.Sessions == nil {
		c.Sessions = []string{}
	}
	return c, nil
}

// History lists the cluster's config history from Consul KV, oldest first:
// GET /admin/history with --consul, the same on every gateway of the
// cluster. An entry that does not decode is left out and logged.
func (cc *ConsulControl) History(ctx context.Context) ([]Change, error) {
	entries, err := cc.kv.History(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Change, 0, len(entries))
	for _, e := range entries {
		c, err := decodeChange(e)
		if err != nil {
			cc.log.Warn("history entry left out: not a stored change", zap.String("key", cc.kv.HistoryKey(e.Version)), zap.Error(err))
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

// historyWrite is what a change from prev (the config at ifIndex, served
// here with a plan costing prevCost) to next (planned at cost) adds to the
// cluster's history, and the version it gets. When the newest entry was not
// written with the config at ifIndex (the history is empty: the config was
// seeded; or the key was written outside the gateways, by hand or by a
// re-seed), prev is recorded first, as its own version (cause "initial",
// who "file"; or "external", who "consul"), so that it can be rolled back
// to. The oldest entries beyond cc.histLen are deleted in the same write.
func (cc *ConsulControl) historyWrite(ctx context.Context, prev, next *api.Config, ifIndex uint64, prevCost, cost float64,
	cause, who, note string) (cluster.HistoryWrite, uint64, error) {
	entries, err := cc.kv.History(ctx)
	if err != nil {
		return cluster.HistoryWrite{}, 0, err
	}
	var hw cluster.HistoryWrite
	now := time.Now()
	v := uint64(1)
	var last *cluster.HistoryEntry
	if n := len(entries); n > 0 {
		last = &entries[n-1]
		v = last.Version + 1
	}
	if last == nil || last.Index != ifIndex {
		base := Change{Version: v, At: now, Cause: "initial", Who: "file", PlanCost: prevCost}
		var before *api.Config
		if last != nil {
			base.Cause, base.Who = "external", "consul"
			base.Note = fmt.Sprintf("%s written outside the gateways (by hand, or seeded again)", cc.kv.ConfigKey())
			if c, err := decodeChange(*last); err == nil {
				before = c.cfg
			}
		}
		base.Sessions, base.Diff = diffSessions(before, prev, v)
		if last != nil && before == nil {
			base.Sessions = sessionNames(prev)
		}
		b, err := encodeChange(base, prev)
		if err != nil {
			return cluster.HistoryWrite{}, 0, err
		}
		hw.Put = append(hw.Put, cluster.HistoryEntry{Version: v, Value: b})
		v++
	}
	c := Change{Version: v, At: now, Cause: cause, Who: who, Note: note, PlanCost: cost}
	c.Sessions, c.Diff = diffSessions(prev, next, v)
	b, err := encodeChange(c, next)
	if err != nil {
		return cluster.HistoryWrite{}, 0, err
	}
	hw.Put = append(hw.Put, cluster.HistoryEntry{Version: v, Value: b})
	for _, e := range entries {
		// At most 64 deletions a write (Consul caps a transaction's
		// operations); a longer backlog goes with the next changes.
		if e.Version+uint64(cc.histLen) <= v && len(hw.Delete) < 64 {
			hw.Delete = append(hw.Delete, e.Version)
		}
	}
	return hw, v, nil
}
