package api

import "time"

// BackendView is what a gateway's GET /admin/backends answers (JSON): the
// membership it serves with. Source is "static" (the config's backends list)
// or "consul"; Stale is true when the source is unreachable and the list is
// the last one seen (Error says why). The gateway's admin API
// (controlplane) writes it and `piccolo status` reads it: a wire format, kept
// here so that the reader need not import the writer.
type BackendView struct {
	Source   string        `json:"source"`
	Stale    bool          `json:"stale"`
	Error    string        `json:"error,omitempty"`
	At       time.Time     `json:"at,omitzero"`
	Backends []BackendInfo `json:"backends"`
}

// BackendInfo is one backend of a BackendView. Placed lists "session/module" of
// every plan group placed on it (filled in by the admin API from the running
// plan).
type BackendInfo struct {
	ID             string   `json:"id"`
	Address        string   `json:"address"`
	Hardware       string   `json:"hardware"`
	Price          float64  `json:"price,omitempty"`
	GPU            string   `json:"gpu,omitempty"`
	GPUMemoryBytes uint64   `json:"gpu_memory_bytes,omitempty"`
	Models         []string `json:"models,omitempty"`
	Placed         []string `json:"placed,omitempty"`
}
