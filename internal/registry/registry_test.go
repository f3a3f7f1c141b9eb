package registry

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type strategy string

func (s strategy) Name() string { return string(s) }

func TestRegistry(t *testing.T) {
	r, err := New("flush rule", "flush rules", strategy("deadline"), strategy("idle"))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := r.Lookup("idle"); err != nil || s != "idle" {
		t.Errorf("Lookup(idle) = %v, %v", s, err)
	}
	if _, err := r.Lookup("eager"); err == nil || err.Error() != `unknown flush rule "eager"; allowed: deadline, idle` {
		t.Errorf("Lookup(eager) = %v; want the error naming the registered rules", err)
	}
	more, err := r.With(strategy("eager"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"deadline", "idle", "eager"}, more.Names()); diff != "" {
		t.Errorf("With: names (-want +got):\n%s", diff)
	}
	if _, err := r.Lookup("eager"); err == nil {
		t.Error("With changed the registry it was called on")
	}
	if r.String() != "deadline, idle" {
		t.Errorf("String() = %q", r.String())
	}
	for _, c := range []struct {
		name  string
		items []Named
		want  string
	}{
		{"duplicate", []Named{strategy("a"), strategy("a")}, `two things are called "a"; names must be unique`},
		{"empty", []Named{strategy("")}, "thing 0 (registry.strategy) has an empty name"},
		{"nil", []Named{strategy("a"), nil}, "thing 1 is nil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := New("thing", "things", c.items...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New = %v; want an error containing %q", err, c.want)
			}
		})
	}
}
