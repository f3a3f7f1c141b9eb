package controlplane

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// lineOf is how every problem of a tokens file begins: the file and a line.
var lineOf = regexp.MustCompile(`^tokens\.yaml:[1-9][0-9]*: `)

// FuzzParseAdminTokens feeds arbitrary tokens files (--admin-tokens FILE) to
// ParseAdminTokens: nothing may panic; a refused file's every problem names
// the file and its line; an accepted file holds at least one token, each
// name valid, not reserved and given once, each sha256 once, the list is
// what the gateway takes (adminTokens), and written back as a tokens file it
// parses to the same tokens.
func FuzzParseAdminTokens(f *testing.F) {
	alice, bob := sumHex("alice-secret"), sumHex("bob-secret")
	for _, s := range []string{
		"- name: alice\n  sha256: " + alice + "\n- {name: bob, sha256: " + strings.ToUpper(bob) + "}\n",
		"# piccolo admin tokens\n- name: ci@deploy\n  sha256: " + alice + "\n\n",
		"", "[]\n", "tokens:\n  - name: alice\n", "- name: [\n",
		"- name: alice\n  sha256: " + alice + "\n  token: alice-secret\n",
		"- name: file\n  sha256: x\n- name: bob\n  extra: 1\n  sha256: " + bob + "\n",
		"- name: alice\n  sha256: " + alice + "\n- name: alice\n  sha256: " + alice + "\n",
		"- &a {name: alice, sha256: " + alice + "}\n- *a\n",
		"- {name: Consul, sha256: " + alice + "}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseAdminTokens("tokens.yaml", data)
		if err != nil {
			if got != nil {
				t.Fatalf("tokens %v returned with an error", got)
			}
			if !strings.HasPrefix(err.Error(), "tokens.yaml:") {
				t.Fatalf("error does not name the file: %v", err)
			}
			var joined interface{ Unwrap() []error }
			if errors.As(err, &joined) {
				for _, e := range joined.Unwrap() {
					if !lineOf.MatchString(e.Error()) {
						t.Fatalf("problem does not name its line: %q", e)
					}
				}
			}
			return
		}
		if len(got) == 0 {
			t.Fatal("no tokens and no error")
		}
		names, sums := map[string]bool{}, map[[32]byte]bool{}
		var back strings.Builder
		for _, tok := range got {
			if !tokenName.MatchString(tok.Name) || isReserved(tok.Name) || names[tok.Name] || sums[tok.SHA256] {
				t.Fatalf("accepted token %q %x of %v", tok.Name, tok.SHA256, got)
			}
			names[tok.Name], sums[tok.SHA256] = true, true
			fmt.Fprintf(&back, "- name: %q\n  sha256: %x\n", tok.Name, tok.SHA256)
		}
		if _, err := adminTokens("", got); err != nil {
			t.Fatalf("parsed tokens refused by the gateway: %v", err)
		}
		again, err := ParseAdminTokens("back.yaml", []byte(back.String()))
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("written back as\n%s\nthe tokens parse to %v, %v; want %v", back.String(), again, err, got)
		}
		for _, tok := range got {
			if n := matchToken(got, tok.SHA256); n != tok.Name {
				t.Fatalf("the sha256 of %q matches %q", tok.Name, n)
			}
		}
	})
}
