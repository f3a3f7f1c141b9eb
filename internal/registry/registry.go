// Package registry is the one shape of Piccolo's strategy registries: the
// dispatch policies (dispatcher.Registry), flush rules, planning policies
// (planner.PolicyRegistry), latency models, latency splits, variant searches
// (planner), arrival processes (arrival), backend executors
// (process.ExecutorRegistry) and log formats. A strategy is a value with a
// Name; a Registry maps names to strategies of one kind, in the order given
// (the default first, by convention), and says which names it has when asked
// for one it has not.
//
// A Registry is built whole by New (or With, which adds to a copy) and is
// immutable after, so any goroutine may read it. Packages offer a registry of
// their own strategies, named Builtin or Builtin<Kinds> (dispatcher.Builtin,
// planner.BuiltinPolicies, process.BuiltinExecutors); main, or a test, builds
// one with more and hands it down through options. Nothing registers itself in init():
// what a binary offers is what its main lists (the shape of the Gateway API
// Inference Extension's plugin registry and CoreDNS's plugin.Register, made
// explicit).
package registry

import (
	"fmt"
	"slices"
	"strings"
)

// Named is a strategy: Name is what users choose it by (a flag value, a
// config field), lower case, unique within a Registry.
type Named interface{ Name() string }

// Registry holds the strategies of one kind, by name. Immutable.
type Registry[T Named] struct {
	kind, kinds string // "dispatch policy", "dispatch policies": for messages
	byName      map[string]T
	names       []string
}

// New returns a registry of the strategies of kind (singular, plural: for
// messages, e.g. "flush rule", "flush rules"), listed in the order given. A
// nil strategy, an empty name or two strategies of one name is an error
// naming it.
func New[T Named](kind, kinds string, items ...T) (*Registry[T], error) {
	r := &Registry[T]{kind: kind, kinds: kinds, byName: make(map[string]T, len(items))}
	return r.add(items)
}

// With returns a new registry holding r's strategies and then items (r is
// unchanged): how a test or a main offers a strategy of its own beside the
// built-in ones. Errors are New's.
func (r *Registry[T]) With(items ...T) (*Registry[T], error) {
	c := &Registry[T]{kind: r.kind, kinds: r.kinds, byName: make(map[string]T, len(r.names)+len(items)), names: slices.Clone(r.names)}
	for k, v := range r.byName {
		c.byName[k] = v
	}
	return c.add(items)
}

func (r *Registry[T]) add(items []T) (*Registry[T], error) {
	for i, s := range items {
		if any(s) == nil {
			return nil, fmt.Errorf("%s %d is nil", r.kind, i)
		}
		name := s.Name()
		if name == "" {
			return nil, fmt.Errorf("%s %d (%T) has an empty name", r.kind, i, s)
		}
		if _, dup := r.byName[name]; dup {
			return nil, fmt.Errorf("two %s are called %q; names must be unique", r.kinds, name)
		}
		r.byName[name] = s
		r.names = append(r.names, name)
	}
	return r, nil
}

// Must returns r, panicking on err: for the built-in registries, whose names
// are constants (each package's tests build them).
func Must[T Named](r *Registry[T], err error) *Registry[T] {
	if err != nil {
		panic(err)
	}
	return r
}

// Lookup returns the strategy called name, or an error naming the allowed
// ones: `unknown flush rule "x"; allowed: deadline, idle`.
func (r *Registry[T]) Lookup(name string) (T, error) {
	if s, ok := r.byName[name]; ok {
		return s, nil
	}
	var zero T
	return zero, fmt.Errorf("unknown %s %q; allowed: %s", r.kind, name, r)
}

// Names returns the registered names in the order they were given.
func (r *Registry[T]) Names() []string { return slices.Clone(r.names) }

// String returns the registered names, comma separated, in Names' order:
// for flag help and error messages.
func (r *Registry[T]) String() string { return strings.Join(r.names, ", ") }
