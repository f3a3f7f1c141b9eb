package tenants

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// FuzzParseTenants feeds arbitrary tenants files (--tenants FILE) to Parse:
// nothing may panic; a refused file's every problem names the tenant (or
// says what the file should be); an accepted file holds at least one
// tenant, each named once, each key 64 hex digits held by one tenant only,
// each limit in range, and Set puts exactly those tenants and keys in force.
func FuzzParseTenants(f *testing.F) {
	k, j := hash("k"), hash("j")
	for _, s := range []string{
		"tenants:\n  - {name: a, keys: [" + k + "], rate: 0.001, burst: 2, concurrency: 1, max_priority: low}\n",
		"tenants:\n  - name: a\n    keys: [" + k + ", " + strings.ToUpper(j) + "]\n  - {name: b, keys: [\" " + hash("b") + " \"], rate: 1e9, max_priority: high}\n",
		"tenants: [", "tenants: []", "tenants: [{name: a, keys: [" + k + "], rates: 5}]",
		"tenants: [{name: a, keys: [" + k + "]}, {name: a, keys: [" + j + "]}]",
		"tenants: [{name: a, keys: [" + k + "]}, {name: b, keys: [" + strings.ToUpper(k) + "]}]",
		"tenants: [{name: a, keys: [secret], rate: -1, burst: 3, concurrency: -2, max_priority: urgent}]",
		"tenants: [{name: a, keys: [" + k + "], rate: .nan}]", "tenants: [{name: a, keys: [" + k + "], rate: 1e-300}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			if file != nil {
				t.Fatalf("file %+v returned with an error", file)
			}
			var joined interface{ Unwrap() []error }
			if !errors.As(err, &joined) {
				if msg := err.Error(); !strings.HasPrefix(msg, "want YAML `tenants:") && !strings.HasPrefix(msg, "no tenants:") {
					t.Fatalf("error says neither what the file should be nor which tenant: %v", err)
				}
				return
			}
			for _, e := range joined.Unwrap() {
				if !strings.HasPrefix(e.Error(), "tenants[") {
					t.Fatalf("problem does not name its tenant: %q", e)
				}
			}
			return
		}
		if len(file.Tenants) == 0 {
			t.Fatal("no tenants and no error")
		}
		names, owner := map[string]bool{}, map[[sha256.Size]byte]string{}
		var want []string
		for _, s := range file.Tenants {
			if s.Name == "" || names[s.Name] || len(s.Keys) == 0 || s.Rate < 0 || math.IsNaN(s.Rate) || math.IsInf(s.Rate, 0) ||
				s.Burst < 0 || s.Burst > 0 && s.Rate == 0 || s.Concurrency < 0 {
				t.Fatalf("accepted tenant %+v", s)
			}
			if _, ok := classNames[s.MaxPriority]; !ok && s.MaxPriority != "" {
				t.Fatalf("accepted max_priority %q", s.MaxPriority)
			}
			names[s.Name] = true
			want = append(want, s.Name)
			for _, key := range s.Keys {
				b, err := hex.DecodeString(strings.TrimSpace(key))
				if err != nil || len(b) != sha256.Size {
					t.Fatalf("accepted key %q of %q", key, s.Name)
				}
				h := [sha256.Size]byte(b)
				if o, dup := owner[h]; dup {
					t.Fatalf("key %q held by %q and %q", key, o, s.Name)
				}
				owner[h] = s.Name
			}
		}
		tt, err := New(nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // a load, then a reload of the same file
			tt.Set(file)
			if got := tt.Names(); !reflect.DeepEqual(got, want) {
				t.Fatalf("in force %v, want %v", got, want)
			}
			tab := tt.tab.Load()
			if len(tab.byKey) != len(owner) {
				t.Fatalf("%d keys in force, want %d", len(tab.byKey), len(owner))
			}
			for h, name := range owner {
				tn := tab.byKey[h]
				if tn == nil || tn.Name != name {
					t.Fatalf("key %x names %v, want %q", h, tn, name)
				}
				if err := tn.Admit(); err == nil {
					tn.Done()
				}
			}
		}
	})
}
