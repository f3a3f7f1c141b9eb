package faults

import (
	"strings"
	"testing"
)

// FuzzDecodeSet: any PUT body either decodes to a valid Set or is refused with
// an error; never a panic, never an out-of-range Set.
func FuzzDecodeSet(f *testing.F) {
	for _, s := range []string{`{}`, `{"slow": 3, "fail": 0.1}`, `{"refuse": true}`, `{"slow": 0.5}`, `{"x": 1}`, `{} {}`, `[`, `{"fail": 1e400}`,
		`{"slow": 3, "slow_share": 0.3}`, `{"slow_share": 1}`, `{"slow": 8, "slow_share": -0.1}`, `{"slowshare": 0.3}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		s, err := decodeSet(strings.NewReader(body))
		if err == nil && s.Validate() != nil {
			t.Fatalf("decodeSet(%q) = %+v, which does not validate", body, s)
		}
	})
}

// FuzzParse: any --fault words parse to a valid Set whose String parses back
// to the same faults, or are refused.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"refuse", "slow=3,fail=0.1", "hang,malformed,reset", "none", "slow=1", "fail=", "crash", "slow=1e3",
		"slow=3,slowshare=0.3", "slowshare=0.3", "slow=8,slowshare=1", "slow=2,slowshare=0", "slowshare=1.5", "slowshare=NaN,slow=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := Parse([]string{spec})
		if err != nil {
			return
		}
		if s.Validate() != nil {
			t.Fatalf("Parse(%q) = %+v, which does not validate", spec, s)
		}
		back, err := Parse([]string{s.String()})
		if err != nil || back.String() != s.String() {
			t.Fatalf("Parse(%q) = %s; parsing that gives %s, %v", spec, s, back, err)
		}
	})
}
