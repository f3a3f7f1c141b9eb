package backends_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/backends"
)

func TestUnion(t *testing.T) {
	u, err := backends.NewUnion(splitter{}, named{"a", "z"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := u.Models(), []string{"a", "bad", "split", "z"}; !reflect.DeepEqual(got, want) {
		t.Errorf("models %v, want %v", got, want)
	}
	m, err := u.Load("split", 1, 1)
	if err != nil || !m.Info().FanOut {
		t.Fatalf("load split: %v (info %+v); want the splitter's fan-out model", err, m)
	}
	if _, err := u.Load("a", 1, 1); err == nil || !strings.Contains(err.Error(), "named executor") {
		t.Errorf("load a: %v; want the second executor's own error", err)
	}
	if _, err := u.Load("nope", 1, 1); !errors.Is(err, backends.ErrUnknownModel) {
		t.Errorf("load nope: %v; want ErrUnknownModel", err)
	}
	if _, err := backends.NewUnion(splitter{}, named{"split"}); err == nil || !strings.Contains(err.Error(), `"split" is offered by two`) {
		t.Errorf("clash: %v; want an error naming split", err)
	}
}

// named offers models it cannot load.
type named []string

func (n named) Models() []string { return n }
func (n named) Load(model string, _, _ int) (backends.Model, error) {
	return nil, errors.New("named executor loads nothing")
}
