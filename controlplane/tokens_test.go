package controlplane

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/internal/testharness"
)

func sumHex(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

func TestParseAdminTokens(t *testing.T) {
	alice, bob := sumHex("alice-secret"), sumHex("bob-secret")
	for _, tc := range []struct {
		name, file string
		want       []string // names, in order; nil: an error
		errs       []string // substrings of the error, each required
	}{
		{name: "two tokens", file: "- name: alice\n  sha256: " + alice + "\n- {name: bob, sha256: " + strings.ToUpper(bob) + "}\n", want: []string{"alice", "bob"}},
		{name: "a comment and a Secret's trailing newline", file: "# piccolo admin tokens\n- name: ci@deploy\n  sha256: " + alice + "\n\n", want: []string{"ci@deploy"}},
		{name: "empty file", file: "", errs: []string{"tokens.yaml: no tokens", "want a YAML list of {name, sha256}"}},
		{name: "empty list", file: "[]\n", errs: []string{"tokens.yaml:1: the list is empty"}},
		{name: "a null name", file: "- name: null\n  sha256: " + alice + "\n", errs: []string{"tokens.yaml:1: name: want a plain string, not an alias, list, mapping or null"}},
		{name: "a second document", file: "- name: alice\n  sha256: " + alice + "\n---\n- name: bob\n  sha256: " + bob + "\n", errs: []string{"tokens.yaml:3: a second YAML document"}},
		{name: "a mapping, not a list", file: "tokens:\n  - name: alice\n", errs: []string{"tokens.yaml:1: not a list"}},
		{name: "not YAML", file: "- name: [\n", errs: []string{"tokens.yaml: yaml:"}},
		{name: "unknown field", file: "- name: alice\n  sha256: " + alice + "\n  token: alice-secret\n", errs: []string{`tokens.yaml:3: unknown field "token"; allowed: name, sha256`}},
		{name: "no name", file: "- sha256: " + alice + "\n", errs: []string{"tokens.yaml:1: entry 1 has no name"}},
		{name: "bad name", file: "- name: al ice\n  sha256: " + alice + "\n", errs: []string{`tokens.yaml:1: name "al ice": want letters, digits`}},
		{name: "reserved name", file: "- name: file\n  sha256: " + alice + "\n", errs: []string{`tokens.yaml:1: name "file" is reserved`}},
		{name: "name twice", file: "- name: alice\n  sha256: " + alice + "\n- name: alice\n  sha256: " + bob + "\n", errs: []string{`tokens.yaml:3: name "alice" given twice (first on line 1)`}},
		{name: "the token itself", file: "- name: alice\n  sha256: alice-secret\n", errs: []string{`tokens.yaml:2: sha256 of "alice" is not 64 hex digits (12 characters)`, "never the token itself"}},
		{name: "no sha256", file: "- name: alice\n", errs: []string{"tokens.yaml:1: entry 1 (alice) has no sha256"}},
		{name: "one token, two names", file: "- name: alice\n  sha256: " + alice + "\n- name: bob\n  sha256: " + alice + "\n", errs: []string{`tokens.yaml:4: sha256 of "bob" is also "alice"'s`}},
		{name: "a name by alias", file: "- name: &n alice\n  sha256: " + alice + "\n- name: *n\n  sha256: " + bob + "\n", errs: []string{"tokens.yaml:3: name: want a plain string, not an alias"}},
		{name: "a name twice in one entry", file: "- {name: alice, name: bob, sha256: " + alice + "}\n", errs: []string{`tokens.yaml:1: field "name" given twice (first on line 1)`}},
		{name: "every problem at once", file: "- name: file\n  sha256: x\n- name: bob\n  extra: 1\n  sha256: " + bob + "\n",
			errs: []string{`tokens.yaml:1: name "file" is reserved`, `tokens.yaml:2: sha256 of "file" is not 64 hex digits`, `tokens.yaml:4: unknown field "extra"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAdminTokens("tokens.yaml", []byte(tc.file))
			if tc.want == nil {
				if err == nil {
					t.Fatalf("accepted %q as %v; want an error", tc.file, got)
				}
				for _, e := range tc.errs {
					if !strings.Contains(err.Error(), e) {
						t.Errorf("error %q\ndoes not say %q", err, e)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tok := range got {
				names = append(names, tok.Name)
				if tok.Name == "alice" && hex.EncodeToString(tok.SHA256[:]) != alice {
					t.Errorf("alice's sha256 %x, want %s", tok.SHA256, alice)
				}
			}
			if !reflect.DeepEqual(names, tc.want) {
				t.Errorf("names %v, want %v", names, tc.want)
			}
		})
	}
}

// TestAdminNamedTokens: a tokens file mounted as Kubernetes mounts a Secret
// (a symlink into a ..data directory) and --admin-token together; each
// change is recorded in the history under its token's name; an unknown
// token is 401; names that would collide are refused at start.
func TestAdminNamedTokens(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_01_01_00_00_00.000000001")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	file := "- name: alice\n  sha256: " + sumHex("alice-secret") + "\n- name: bob\n  sha256: " + sumHex("bob-secret") + "\n"
	if err := os.WriteFile(filepath.Join(data, "tokens.yaml"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokens.yaml")
	if err := os.Symlink(filepath.Join("..data", "tokens.yaml"), path); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadAdminTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	base, err := api.LoadBytes(api.NamedDoc{Name: "profiles.yaml", Data: []byte(adminConfig)})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "config.yaml", Data: []byte(adminConfig + "\n" + testharness.StartSimBackends(t, base.Profiles, 2))})
	if err != nil {
		t.Fatal(err)
	}
	h := bootAdminWith(t, cfg, testPlanner, func(o *AdminOptions) { o.Tokens = tokens })

	for i, tok := range []string{"alice-secret", "bob-secret", adminToken} {
		body := fmt.Sprintf("name: solo\nslo: 1s\nmodules:\n  - {name: only, model: rec, rate: %d}\n", 30+10*i)
		if st, _, b := adminDo(t, "PUT", h.url+"/admin/sessions/solo", tok, body); st != 200 {
			t.Fatalf("PUT with token %d: %d %s", i, st, b)
		}
	}
	if st, _, b := adminDo(t, "PUT", h.url+"/admin/sessions/solo", "carol-secret", "name: solo\nslo: 1s\nmodules:\n  - {name: only, model: rec, rate: 90}\n"); st != 401 {
		t.Errorf("PUT with an unknown token: %d %s; want 401", st, b)
	}
	if st, _, b := adminDo(t, "POST", h.url+"/admin/sessions/solo:rollback?to=2", "bob-secret", ""); st != 200 {
		t.Fatalf("rollback with bob's token: %d %s", st, b)
	}
	st, _, b := adminDo(t, "GET", h.url+"/admin/history", "alice-secret", "")
	var hist struct{ Changes []Change }
	if err := json.Unmarshal(b, &hist); st != 200 || err != nil {
		t.Fatalf("GET /admin/history: %d %v %s", st, err, b)
	}
	var who []string
	for _, c := range hist.Changes {
		who = append(who, fmt.Sprintf("%d %s", c.Version, c.Who))
	}
	if want := []string{"1 file", "2 alice", "3 bob", "4 admin", "5 bob"}; !reflect.DeepEqual(who, want) {
		t.Errorf("history's who %v, want %v", who, want)
	}

	// Refused at start: a file's token named as --admin-token's, one token
	// under two names, no token at all.
	for _, tc := range []struct {
		token  string
		tokens []AdminToken
		want   string
	}{
		{adminToken, []AdminToken{{Name: "admin", SHA256: tokens[0].SHA256}}, `names a token "admin", the name of --admin-token's`},
		{"alice-secret", tokens, `admin tokens "admin" and "alice" are the same token`},
		{"", nil, "needs a bearer token (--admin-token, PICCOLO_ADMIN_TOKEN or --admin-tokens FILE)"},
	} {
		_, err := NewAdmin(AdminOptions{Token: tc.token, Tokens: tc.tokens, Store: h.store, Plan: h.sw.Plan})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewAdmin(token %q, %d named): %v; want %q", tc.token, len(tc.tokens), err, tc.want)
		}
	}
}
