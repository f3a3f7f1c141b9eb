package tenants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func hash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// TestParseErrors: every invalid tenants file is refused naming the tenant,
// the field and what is allowed.
func TestParseErrors(t *testing.T) {
	k := hash("k")
	for _, c := range []struct{ name, file, want string }{
		{"not YAML", "tenants: [", "want YAML `tenants:"},
		{"unknown field", "tenants: [{name: a, keys: [" + k + "], rates: 5}]", "field rates not found"},
		{"no tenants", "tenants: []", "no tenants: every request would be refused"},
		{"no name", "tenants: [{keys: [" + k + "]}]", `tenants[0] "": name is empty`},
		{"a name twice", "tenants: [{name: a, keys: [" + k + "]}, {name: a, keys: [" + hash("j") + "]}]", `tenants[1] "a": name given twice`},
		{"no keys", "tenants: [{name: a}]", `tenants[0] "a": no keys`},
		{"a key in clear", "tenants: [{name: a, keys: [secret]}]", "keys[0]: want the SHA-256 of the key as 64 hex digits"},
		{"a key held twice", "tenants: [{name: a, keys: [" + k + "]}, {name: b, keys: [" + strings.ToUpper(k) + "]}]", `tenants[1] "b": keys[0]: the same key is held by tenant "a"`},
		{"negative rate", "tenants: [{name: a, keys: [" + k + "], rate: -1}]", "rate -1: want requests per second ≥ 0"},
		{"burst without rate", "tenants: [{name: a, keys: [" + k + "], burst: 3}]", "burst 3 without a rate"},
		{"negative concurrency", "tenants: [{name: a, keys: [" + k + "], concurrency: -2}]", "concurrency -2: want ≥ 0"},
		{"unknown class", "tenants: [{name: a, keys: [" + k + "], max_priority: urgent}]", `max_priority "urgent": want high, normal (the default) or low`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestLimits: the bucket, the concurrency and the class, on a table Set
// from a parsed file; a reload keeps a tenant's bucket and requests in
// flight.
func TestLimits(t *testing.T) {
	tt, err := New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse([]byte("tenants:\n  - {name: a, keys: [" + hash("ka") + "], rate: 0.001, burst: 2, concurrency: 1, max_priority: low}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tt.Set(f)
	if _, err := tt.Identify(nil); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("no key: %v", err)
	}
	if _, err := tt.Identify([]byte("kb")); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("unknown key: %v", err)
	}
	tn, err := tt.Identify([]byte("ka"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tn.AllowClass(ClassNormal); !errors.Is(err, ErrForbidden) {
		t.Errorf("normal for a tenant of low: %v", err)
	}
	if err := tn.Admit(); err != nil {
		t.Fatal(err)
	}
	if err := tn.Admit(); !errors.Is(err, ErrLimited) || err.(*Refusal).Reason != "concurrency" {
		t.Errorf("second in flight: %v", err)
	}
	tn.Done()
	// A reload with the same tenant: one token of the burst of 2 is spent
	// and stays spent.
	tt.Set(f)
	tn, _ = tt.Identify([]byte("ka"))
	if err := tn.Admit(); err != nil {
		t.Fatal(err)
	}
	tn.Done()
	err = tn.Admit()
	var r *Refusal
	if !errors.As(err, &r) || r.Reason != "rate" || r.RetryAfter < 900*time.Second {
		t.Errorf("third request at 0.001/s, burst 2: %v, want a rate refusal with Retry-After about 1000 s", err)
	}
}

// TestWatch: an edit of the file is applied; an invalid one is refused
// (onReload gets its error) and the tenants in force stay.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tenants.yaml")
	write := func(s string) {
		// rename over the file, as editors and Secret updates do
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("tenants: [{name: a, keys: [" + hash("ka") + "]}]\n")
	tt, _ := New(nil)
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tt.Set(f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reloads := make(chan error, 16)
	if err := Watch(ctx, path, tt, nil, func(err error) { reloads <- err }); err != nil {
		t.Fatal(err)
	}
	wait := func() error {
		select {
		case err := <-reloads:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("no reload within 30 s")
			return nil
		}
	}
	write("tenants: [{name: a, keys: [" + hash("ka") + "]}, {name: b, keys: [" + hash("kb") + "]}]\n")
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := tt.Identify([]byte("kb")); err != nil {
		t.Errorf("a key added to the file: %v", err)
	}
	write("tenants: [{name: a, keys: [not-a-hash]}]\n")
	if err := wait(); err == nil || !strings.Contains(err.Error(), "64 hex digits") {
		t.Fatalf("invalid file: %v", err)
	}
	for _, k := range []string{"ka", "kb"} {
		if _, err := tt.Identify([]byte(k)); err != nil {
			t.Errorf("key %s after an invalid file: %v; want the tenants in force kept", k, err)
		}
	}
}
