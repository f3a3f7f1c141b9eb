package status

import (
	"bytes"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
)

// TestStatusWriteBackends: the backends table, its heading with the source, and
// a stale membership marked as such with when and why.
func TestWriteBackends(t *testing.T) {
	at := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		view api.BackendView
		want string
	}{
		{
			name: "static",
			view: api.BackendView{Source: "static", Backends: []api.BackendInfo{
				{ID: "gpu-0", Hardware: "v100", Address: "10.0.0.1:9101", Placed: []string{"s/a", "s/b"}},
				{ID: "cpu-10", Hardware: "cpu-4c", Address: "10.0.0.2:9101"},
			}},
			want: "backends (from /admin/backends): source static\n" +
				"ID      HARDWARE  ADDRESS        PLACED\n" +
				"gpu-0   v100      10.0.0.1:9101  s/a, s/b\n" +
				"cpu-10  cpu-4c    10.0.0.2:9101  none\n\n",
		},
		{
			name: "stale consul",
			view: api.BackendView{Source: "consul", Stale: true, At: at, Error: "consul: connection refused",
				Backends: []api.BackendInfo{{ID: "gpu-0", Hardware: "v100", Address: "10.0.0.1:9101"}}},
			want: "backends (from /admin/backends): source consul, STALE since 2026-11-23T10:00:00Z: consul: connection refused\n" +
				"ID     HARDWARE  ADDRESS        PLACED\n" +
				"gpu-0  v100      10.0.0.1:9101  none\n\n",
		},
		{
			name: "none",
			view: api.BackendView{},
			want: "backends (from /admin/backends): source -\nID  HARDWARE  ADDRESS  PLACED\n\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeBackends(&b, &tc.view); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}
