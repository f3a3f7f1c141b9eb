package kserve

import (
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/internal/testharness"
)

// TestHTTPShapesMatchSpec checks the bodies KServe clients parse against the
// protocol's schemas (rest_predict_v2.yaml): model metadata has name, versions
// (strings), platform, and inputs and outputs as lists of {name, datatype,
// shape}; every error body is exactly {"error": "<message>"}.
func TestHTTPShapesMatchSpec(t *testing.T) {
	ts := startServers(t, 4096)
	for _, path := range []string{"/v2/models/chain", "/v2/models/chain/versions/1"} {
		status, m := testharness.HTTPDo(t, "GET", ts.url+path, "")
		if status != 200 {
			t.Fatalf("GET %s = %d", path, status)
		}
		if _, ok := m["name"].(string); !ok {
			t.Errorf("GET %s: name %v is not a string", path, m["name"])
		}
		if _, ok := m["platform"].(string); !ok {
			t.Errorf("GET %s: platform %v is not a string", path, m["platform"])
		}
		if vs, ok := m["versions"].([]any); !ok || len(vs) == 0 {
			t.Errorf("GET %s: versions %v is not a list of strings", path, m["versions"])
		}
		for _, k := range []string{"inputs", "outputs"} {
			list, ok := m[k].([]any)
			if !ok {
				t.Errorf("GET %s: %s %v is not a list (an empty one when unknown)", path, k, m[k])
			}
			for _, x := range list {
				tm, _ := x.(map[string]any)
				if _, ok := tm["name"].(string); !ok || tm["datatype"] == nil || tm["shape"] == nil {
					t.Errorf("GET %s: %s entry %v lacks name, datatype or shape", path, k, x)
				}
			}
		}
	}
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/v2/models/nope", ""},
		{"GET", "/v2/models/nope/ready", ""},
		{"POST", "/v2/models/nope/infer", goodBody},
		{"POST", "/v2/models/chain/infer", `{"inputs":[`},
		{"POST", "/v2/models/chain/infer", `{"inputs":[{"name":"x","shape":[1],"datatype":"BYTES","data":["` + strings.Repeat("a", 5000) + `"]}]}`},
		{"GET", "/v2/models/chain/infer", ""},
		{"POST", "/v2/models/down/infer", goodBody},
		{"GET", "/v3", ""},
	} {
		status, m := testharness.HTTPDo(t, tc.method, ts.url+tc.path, tc.body)
		msg, ok := m["error"].(string)
		if status < 400 || !ok || msg == "" || len(m) != 1 {
			t.Errorf("%s %s: status %d body %v; want an error status and exactly {\"error\": \"...\"}", tc.method, tc.path, status, m)
		}
	}
}
