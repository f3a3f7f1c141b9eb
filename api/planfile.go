package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// ReadPlanFile reads a plan JSON (the shape of `piccolo plan -o json`, or written
// by hand) from path: `piccolo simulate --plan` and `piccolo gateway --plan`
// read through it. Errors name the file (os.Open's error, or ReadPlan's).
func ReadPlanFile(path string) (*Plan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadPlan(f, path)
}

// ReadPlan decodes a plan JSON; name (a file name) prefixes errors. Unknown fields
// are errors (a misspelt "batch_size" must not silently read as batch 0), and so is
// a plan with no session or a session whose module lacks a name or groups; the
// numbers of each group are checked when the dispatcher is built.
func ReadPlan(r io.Reader, name string) (*Plan, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return nil, fmt.Errorf("%s:%d: plan JSON: %w", name, lineOf(data, se.Offset), err)
		case errors.As(err, &te):
			return nil, fmt.Errorf("%s:%d: plan JSON: field %q: %v value where %v is wanted", name, lineOf(data, te.Offset), te.Field, te.Value, te.Type)
		}
		return nil, fmt.Errorf("%s: plan JSON: %w", name, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: plan JSON: more than one JSON value", name)
	}
	if len(p.Sessions) == 0 {
		return nil, fmt.Errorf("%s: plan has no sessions", name)
	}
	for _, s := range p.Sessions {
		if s.Name == "" {
			return nil, fmt.Errorf("%s: a session has no name", name)
		}
		if s.Error != "" {
			continue
		}
		if len(s.Modules) == 0 {
			return nil, fmt.Errorf("%s: session %q has no modules", name, s.Name)
		}
		for i, m := range s.Modules {
			if m.Name == "" {
				return nil, fmt.Errorf("%s: session %q module %d has no name", name, s.Name, i)
			}
			if len(m.Configs) == 0 {
				return nil, fmt.Errorf("%s: session %q module %q has no configs (groups)", name, s.Name, m.Name)
			}
		}
	}
	return &p, nil
}

func lineOf(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return 1 + bytes.Count(data[:off], []byte("\n"))
}
