package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	capi "github.com/hashicorp/consul/api"

	"github.com/piccolo-serving/piccolo/api"
)

// MaxValueBytes is Consul's cap on one KV value (the agent's
// kv_max_value_size, 512 KiB by default): a value above it is refused.
const MaxValueBytes = 512 << 10

// historyPrefix holds the cluster's config history, one key per version:
// <prefix>/history/<version, 20 digits> (so the keys sort by version).
func (c *Client) historyPrefix() string { return c.key("history") + "/" }

// HistoryKey is the key of the config history's version v.
func (c *Client) HistoryKey(v uint64) string { return fmt.Sprintf("%s%020d", c.historyPrefix(), v) }

// HistoryEntry is one version of the cluster's config history as stored:
// the version (from its key), the key's ModifyIndex (the ModifyIndex of the
// config written in the same transaction, PutConfigLogged) and the value,
// opaque here (the writer's JSON, controlplane's Change).
type HistoryEntry struct {
	Version uint64
	Index   uint64
	Value   []byte
}

// HistoryWrite is what a config write adds to the history in its own
// transaction: Put entries created at their versions, each only if that key
// is absent (two writers cannot both take a version), and the versions in
// Delete removed (the oldest, to keep the history bounded).
type HistoryWrite struct {
	Put    []HistoryEntry // Version and Value
	Delete []uint64
}

// History lists the history's entries, oldest first. A key under the prefix
// that is not a version is skipped.
func (c *Client) History(ctx context.Context) ([]HistoryEntry, error) {
	ps, _, err := c.c.KV().List(c.historyPrefix(), (&capi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("consul %s: list %s: %w", c.addr, c.historyPrefix(), err)
	}
	out := make([]HistoryEntry, 0, len(ps))
	for _, p := range ps { // Consul lists keys in byte order: by version
		v, err := strconv.ParseUint(strings.TrimPrefix(p.Key, c.historyPrefix()), 10, 64)
		if err != nil {
			continue
		}
		out = append(out, HistoryEntry{Version: v, Index: p.ModifyIndex, Value: p.Value})
	}
	return out, nil
}

// PutConfigLogged is PutConfigPlanned that also writes h in the same
// transaction: the config, its plan and its history entries go in together
// or not at all, and the entries' keys carry the config's new ModifyIndex.
// ErrConfigChanged when the config is no longer at ifIndex or a version in
// h.Put is taken (another writer came first). A value above MaxValueBytes is
// refused before Consul is asked.
func (c *Client) PutConfigLogged(ctx context.Context, cfg *api.Config, planned *ConfigPlan, ifIndex uint64, h HistoryWrite) (uint64, error) {
	var ops capi.KVTxnOps
	for _, e := range h.Put {
		if len(e.Value) > MaxValueBytes {
			return 0, fmt.Errorf("%s: the history entry is %d bytes; Consul takes at most %d", c.HistoryKey(e.Version), len(e.Value), MaxValueBytes)
		}
		ops = append(ops, &capi.KVTxnOp{Verb: capi.KVCAS, Key: c.HistoryKey(e.Version), Value: e.Value, Index: 0})
	}
	for _, v := range h.Delete {
		ops = append(ops, &capi.KVTxnOp{Verb: capi.KVDelete, Key: c.HistoryKey(v)})
	}
	return c.putConfig(ctx, cfg, planned, ifIndex, ops)
}
