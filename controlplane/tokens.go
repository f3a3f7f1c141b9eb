package controlplane

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// AdminToken is one named admin token: Name is who the config history
// records for the changes made with it; SHA256 is the token's SHA-256, so
// that neither the tokens file nor the gateway's memory holds the token.
type AdminToken struct {
	Name   string
	SHA256 [32]byte
}

// DefaultAdminTokenName is the name of the token given with --admin-token
// (or PICCOLO_ADMIN_TOKEN).
const DefaultAdminTokenName = "admin"

// reservedWho are the history's names for changes not made with a token:
// a token may not take them.
var reservedWho = []string{"file", "consul", "cluster"}

var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// LoadAdminTokens reads a tokens file (`piccolo gateway --admin-tokens
// FILE`): a YAML list of {name, sha256}, sha256 being the token's SHA-256 in
// hex (`printf %s "$TOKEN" | sha256sum`), so the file holds no secret; a
// Kubernetes Secret mounted as the file reads the same. Every problem is
// reported, each with its line: a file that does not read or parse, holds
// more than one YAML document, no
// entry, an unknown field, a field given twice in an entry, a name or
// sha256 that is not a plain string (an alias, a list), a name missing, not
// of the form [A-Za-z0-9][A-Za-z0-9._@-]{0,63}, reserved (file, consul,
// cluster) or given twice, a sha256 that is not 64 hex digits or is given
// twice.
func LoadAdminTokens(path string) ([]AdminToken, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseAdminTokens(path, data)
}

// ParseAdminTokens is LoadAdminTokens for the file's content; name is
// used in errors.
func ParseAdminTokens(name string, data []byte) ([]AdminToken, error) {
	const want = "want a YAML list of {name, sha256}, such as\n- name: alice\n  sha256: <64 hex digits: printf %s \"$TOKEN\" | sha256sum>"
	var doc, more yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w; %s", name, err, want)
	}
	// yaml.Unmarshal read the first document only: tokens after a "---"
	// were ignored without a word.
	switch err := dec.Decode(&more); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, fmt.Errorf("%s: %w; %s", name, err, want)
	default:
		return nil, fmt.Errorf("%s:%d: a second YAML document: put every token in the one list; %s", name, more.Line, want)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: no tokens; %s", name, want)
	}
	list := doc.Content[0]
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s:%d: not a list; %s", name, list.Line, want)
	}
	if len(list.Content) == 0 {
		return nil, fmt.Errorf("%s:%d: the list is empty: no token could use the admin API; %s", name, list.Line, want)
	}
	var (
		errs   []error
		out    []AdminToken
		names  = map[string]int{}
		hashes = map[[32]byte]string{}
	)
	bad := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...)))
	}
	for i, item := range list.Content {
		if item.Kind != yaml.MappingNode {
			bad(item.Line, "entry %d is not a mapping; %s", i+1, want)
			continue
		}
		var t struct{ name, sum string }
		var nameLine, sumLine int
		seen := map[string]int{}
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, v := item.Content[j], item.Content[j+1]
			if first, twice := seen[k.Value]; twice {
				bad(k.Line, "field %q given twice (first on line %d)", k.Value, first)
				continue
			}
			seen[k.Value] = k.Line
			if (v.Kind != yaml.ScalarNode || v.Tag == "!!null") && (k.Value == "name" || k.Value == "sha256") {
				// An alias's Value is its anchor's name, not the value; a
				// null's is "null" or "~".
				bad(v.Line, "%s: want a plain string, not an alias, list, mapping or null", k.Value)
				continue
			}
			switch k.Value {
			case "name":
				t.name, nameLine = v.Value, v.Line
			case "sha256":
				t.sum, sumLine = strings.ToLower(v.Value), v.Line
			default:
				bad(k.Line, "unknown field %q; allowed: name, sha256", k.Value)
			}
		}
		switch {
		case t.name == "":
			bad(item.Line, "entry %d has no name: the name is who the config history records", i+1)
		case !tokenName.MatchString(t.name):
			bad(nameLine, "name %q: want letters, digits and . _ @ - (at most 64, starting with a letter or digit)", t.name)
		case isReserved(t.name):
			bad(nameLine, "name %q is reserved: %s are the history's names for changes not made with a token", t.name, strings.Join(reservedWho, ", "))
		case names[t.name] != 0:
			bad(nameLine, "name %q given twice (first on line %d)", t.name, names[t.name])
		default:
			names[t.name] = nameLine
		}
		var h [32]byte
		switch b, err := hex.DecodeString(t.sum); {
		case t.sum == "":
			bad(item.Line, "entry %d (%s) has no sha256: want the token's SHA-256 in hex, never the token itself", i+1, t.name)
			continue
		case err != nil || len(b) != len(h):
			bad(sumLine, "sha256 of %q is not 64 hex digits (%d characters): want the token's SHA-256 (printf %%s \"$TOKEN\" | sha256sum), never the token itself", t.name, len(t.sum))
			continue
		default:
			copy(h[:], b)
		}
		if other, ok := hashes[h]; ok {
			bad(sumLine, "sha256 of %q is also %q's: one token would have two names", t.name, other)
			continue
		}
		hashes[h] = t.name
		out = append(out, AdminToken{Name: t.name, SHA256: h})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func isReserved(name string) bool {
	for _, r := range reservedWho {
		if strings.EqualFold(name, r) {
			return true
		}
	}
	return false
}

// adminTokens checks the admin API's tokens: token (named
// DefaultAdminTokenName) and named, together; at least one, names and
// hashes unique.
func adminTokens(token string, named []AdminToken) ([]AdminToken, error) {
	var all []AdminToken
	if token != "" {
		all = append(all, AdminToken{Name: DefaultAdminTokenName, SHA256: sha256.Sum256([]byte(token))})
	}
	all = append(all, named...)
	if len(all) == 0 {
		return nil, errors.New("controlplane: the admin API needs a bearer token (--admin-token, PICCOLO_ADMIN_TOKEN or --admin-tokens FILE)")
	}
	for i, t := range all {
		if t.Name == "" || isReserved(t.Name) {
			return nil, fmt.Errorf("controlplane: admin token %d: name %q: want a name other than %s", i+1, t.Name, strings.Join(reservedWho, ", "))
		}
		for _, u := range all[:i] {
			switch {
			case u.Name == t.Name && token != "" && u.Name == DefaultAdminTokenName:
				return nil, fmt.Errorf("the tokens file names a token %q, the name of --admin-token's: rename it, or drop --admin-token", t.Name)
			case u.Name == t.Name:
				return nil, fmt.Errorf("controlplane: admin token name %q given twice", t.Name)
			case bytes.Equal(u.SHA256[:], t.SHA256[:]):
				return nil, fmt.Errorf("admin tokens %q and %q are the same token: one token would have two names", u.Name, t.Name)
			}
		}
	}
	return all, nil
}

// matchToken returns the name of the token whose SHA-256 is h, comparing
// with every token in constant time (no early exit, the match selected
// without a branch); "" when none matches.
func matchToken(tokens []AdminToken, h [32]byte) string {
	idx := 0
	for i := range tokens {
		eq := subtle.ConstantTimeCompare(h[:], tokens[i].SHA256[:])
		idx = subtle.ConstantTimeSelect(eq, i+1, idx)
	}
	if idx == 0 {
		return ""
	}
	return tokens[idx-1].Name
}
