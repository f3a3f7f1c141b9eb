package gateway

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

func (s *Server) sessionTensors(d *dag) (in, out []TensorMeta) {
	in, out = []TensorMeta{}, []TensorMeta{}
	src := s.exec.meta
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
