package gateway

import "time"

// TensorMeta describes one input or output of a module or session: KServe v2
// model metadata (-1 in Shape: any size).
type TensorMeta struct {
	Name     string
	Datatype string
	Shape    []int64
}

// MetadataSource is implemented by runners that know their modules' tensors (the
// live runner asks the backends when it loads the models). Model metadata reports
// a session's inputs as its source modules' inputs and its outputs as its sink
// modules' outputs; without a MetadataSource both lists are empty.
type MetadataSource interface {
	ModuleMetadata(session, module string) (inputs, outputs []TensorMeta, ok bool)
}

// SessionMetadata is what KServe model metadata reports of a session: its
// name, SLO and modules in config order, and, when the runner is a
// MetadataSource, its source modules' inputs and its sink modules' outputs
// (empty lists otherwise).
type SessionMetadata struct {
	Name            string
	SLO             time.Duration
	Modules         []string
	Inputs, Outputs []TensorMeta
}

// CheckSession returns nil when session is served, else an error wrapping
// ErrUnknownSession that lists the sessions served.
func (e *DAGRunner) CheckSession(session string) error {
	_, err := e.lookup(session)
	return err
}

// Metadata returns session's metadata, or an error wrapping ErrUnknownSession.
func (e *DAGRunner) Metadata(session string) (SessionMetadata, error) {
	d, err := e.lookup(session)
	if err != nil {
		return SessionMetadata{}, err
	}
	md := SessionMetadata{Name: d.name, SLO: d.slo, Modules: make([]string, len(d.mods))}
	for i := range d.mods {
		md.Modules[i] = d.mods[i].name
	}
	md.Inputs, md.Outputs = e.sessionTensors(d)
	return md, nil
}

func (e *DAGRunner) sessionTensors(d *dag) (in, out []TensorMeta) {
	in, out = []TensorMeta{}, []TensorMeta{}
	src := e.meta
	if src == nil {
		return in, out
	}
	for _, m := range d.sources {
		if i, _, ok := src.ModuleMetadata(d.name, d.mods[m].name); ok {
			in = appendUniqueMeta(in, i)
		}
	}
	for _, m := range d.sinks {
		if _, o, ok := src.ModuleMetadata(d.name, d.mods[m].name); ok {
			out = appendUniqueMeta(out, o)
		}
	}
	return in, out
}

func appendUniqueMeta(dst, add []TensorMeta) []TensorMeta {
next:
	for _, t := range add {
		for _, u := range dst {
			if u.Name == t.Name {
				continue next
			}
		}
		dst = append(dst, t)
	}
	return dst
}
