package kserve

import (
	"github.com/piccolo-serving/piccolo/gateway"
)

// The request limits, checked while a request is decoded (JSON, binary
// extension and gRPC alike), each refused 400 / INVALID_ARGUMENT naming the
// limit. Triton and KServe take a request's inputs and outputs from the
// model's config and refuse any other (so their count is the model's, a
// handful); a Piccolo session's first modules declare a few inputs too, so
// these caps sit far above any session's and far below what would cost
// the gateway anything. Names are bounded as Triton's model and tensor names
// are in practice (a file name: 255 bytes).
const (
	// MaxInputs is the most inputs a request may carry.
	MaxInputs = 256
	// MaxOutputs is the most outputs a request may ask for.
	MaxOutputs = 256
	// MaxParameters is the most keys a "parameters" object (the request's,
	// an input's or an output's) may have.
	MaxParameters = 64
	// MaxNameBytes is the longest input, output, parameter name or request
	// id, in bytes.
	MaxNameBytes = 256
)

// nameSet is the names of a request's inputs or outputs read so far: a
// linear scan while they are few (no allocation for the requests every
// client sends), a map past that, so that MaxInputs names cost linear time.
type nameSet struct {
	n      int
	inline [8]string
	more   map[string]struct{}
}

// add records name and reports false if the set already had it.
func (ns *nameSet) add(name string) bool {
	for _, x := range ns.inline[:min(ns.n, len(ns.inline))] {
		if x == name {
			return false
		}
	}
	if ns.n < len(ns.inline) {
		ns.inline[ns.n] = name
		ns.n++
		return true
	}
	if ns.more == nil {
		ns.more = make(map[string]struct{})
	}
	if _, dup := ns.more[name]; dup {
		return false
	}
	ns.more[name] = struct{}{}
	ns.n++
	return true
}

// checkName refuses a name over MaxNameBytes; what names its place
// ("inputs[3]", "outputs[0]").
func checkName(what string, idx int, name string) error {
	if len(name) > MaxNameBytes {
		return gateway.BadInput("%s[%d]: name of %d bytes is over the limit of %d", what, idx, len(name), MaxNameBytes)
	}
	return nil
}

// checkParamKey refuses a parameter key over MaxNameBytes; where names the
// parameters object ("parameters", "inputs[0]: parameters" …). The JSON
// decoder's three parameter objects and gRPC's maps call it for each key.
func checkParamKey(where string, key string) error {
	if len(key) > MaxNameBytes {
		return gateway.BadInput("%s: key of %d bytes is over the limit of %d", where, len(key), MaxNameBytes)
	}
	return nil
}
