package controlplane

import (
	"testing"

	"github.com/piccolo-serving/piccolo/api"
)

// FuzzAdminSessionBody feeds arbitrary bodies to what PUT
// /admin/sessions/{name} does with its body (withSession: the config
// loader over the running config plus the body): nothing may panic, and a
// body it accepts yields a config holding the session by that name.
func FuzzAdminSessionBody(f *testing.F) {
	cur, err := api.LoadBytes(api.NamedDoc{Name: "base", Data: []byte(`
hardware:
  - {name: v100, price: 3}
profiles:
  - model: det
    hardware: v100
    entries:
      - {batch: 1, concurrency: 1, duration: 5ms}
sessions:
  - name: a
    slo: 500ms
    modules:
      - {name: d, model: det, rate: 20}
`)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"name": "s", "slo": "500ms", "modules": [{"name": "m", "model": "det", "rate": 10}]}`))
	f.Add([]byte("name: s\nslo: 1s\nmodules:\n  - {name: m, model: det, rate: 1}\n  - {name: n, model: det, rate: 1, after: [m]}\n"))
	f.Add([]byte(`{"name": "s", "slo": "500ms", "modules": [{"name": "m", "model": "det", "rate": 10, "after": ["m"]}]}`))
	f.Add([]byte("&a [*a, *a, *a]"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > AdminMaxBodyBytes {
			return // refused 413 before it is read
		}
		got, err := withSession(cur, "s", body, "PUT /admin/sessions/s")
		if err != nil {
			return
		}
		if _, ok := got.Session("s"); !ok {
			t.Fatalf("accepted %q without a session s", body)
		}
	})
}
