package kserve

import (
	"math"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/piccolo-serving/piccolo/gateway"
)

// scanner is a minimal pull parser over one JSON document, written for the infer
// request: we decode numbers straight into a tensor's little-endian bytes, so a
// generic decoder (encoding/json into []any or []float64, then a second conversion
// pass) would cost a reflective walk, an interface box per element and a copy. This
// one allocates nothing for keys and unescaped strings (they are subslices of the
// body) and nothing per number. It accepts exactly RFC 8259 JSON; every error names
// the byte offset.
type scanner struct {
	b       []byte
	i       int
	scratch []byte          // unescaped strings that had escapes
	escaped bool            // the last str had escapes: its bytes are in scratch, valid until the next str
	budget  *inflightBudget // the in-flight budget decoded data take from; nil: none
	held    int             // bytes taken from budget (the caller adds them to the request's hold)
}

// take takes n bytes from the in-flight budget for the decoded data (held).
func (s *scanner) take(n int) error {
	if err := s.budget.take(n); err != nil {
		return err
	}
	if s.budget != nil && n > 0 {
		s.held += n
	}
	return nil
}

// maxDepth bounds nesting (objects and arrays) so hostile input cannot exhaust the stack.
const maxDepth = 64

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte without consuming it, 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) errf(format string, args ...any) error {
	args = append([]any{s.i}, args...)
	return gateway.BadInput("malformed JSON at byte %d: "+format, args...)
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		if s.i >= len(s.b) {
			return s.errf("unexpected end of input, want %q", c)
		}
		return s.errf("want %q, got %q", c, s.b[s.i])
	}
	s.i++
	return nil
}

// more is called inside an object or array after '{'/'[' or after an element:
// it consumes ',' and reports whether another element follows, or consumes the
// closing byte and reports false. first says no element has been read yet.
func (s *scanner) more(closing byte, first bool) (bool, error) {
	c := s.peek()
	if c == closing {
		s.i++
		return false, nil
	}
	if first {
		return true, nil
	}
	if c != ',' {
		if c == 0 {
			return false, s.errf("unexpected end of input, want ',' or %q", closing)
		}
		return false, s.errf("want ',' or %q, got %q", closing, c)
	}
	s.i++
	return true, nil
}

// key reads an object key and the ':' after it, and refuses a key the object
// already had (seen holds the object's keys so far; RFC 8259 leaves what a
// duplicate means to each reader, so a client and the gateway could disagree
// on which value counts: we refuse it, naming the key).
func (s *scanner) key(seen *keySet) ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.errf("want an object key (a string)")
	}
	at := s.i
	k, err := s.str()
	if err != nil {
		return nil, err
	}
	if !seen.add(k, s.escaped) {
		return nil, gateway.BadInput("malformed JSON at byte %d: duplicate key %q: each key may appear once in an object", at, k)
	}
	return k, s.expect(':')
}

// null consumes a JSON null if it is next: an optional field whose value is
// null is read as absent (what clients that serialise nil fields send).
func (s *scanner) null() bool {
	return s.peek() == 'n' && s.literal("null")
}

// keySet is the keys of one JSON object read so far. The first len(inline)
// are kept in place (subslices of the body: no allocation for the objects of
// an infer request); a larger object spills into a map, so a hostile object
// of many keys costs linear time, not quadratic.
type keySet struct {
	n      int
	inline [8][]byte
	more   map[string]struct{}
}

// add records k and reports false if the object already had it. copyKey says
// k is only valid until the scanner's next string (it had escapes).
func (ks *keySet) add(k []byte, copyKey bool) bool {
	for _, x := range ks.inline[:min(ks.n, len(ks.inline))] {
		if string(x) == string(k) {
			return false
		}
	}
	if ks.n < len(ks.inline) {
		if copyKey {
			k = append([]byte(nil), k...)
		}
		ks.inline[ks.n] = k
		ks.n++
		return true
	}
	if ks.more == nil {
		ks.more = make(map[string]struct{})
	}
	if _, dup := ks.more[string(k)]; dup {
		return false
	}
	ks.more[string(k)] = struct{}{}
	ks.n++
	return true
}

// str reads a JSON string at the current position (which must be '"') and returns
// its unescaped bytes: a subslice of the input when it has no escapes, else a
// slice of s.scratch valid until the next call to str.
func (s *scanner) str() ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.errf("want a string")
	}
	s.i++
	s.escaped = false
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			out := s.b[start:s.i]
			s.i++
			return out, nil
		case c == '\\':
			return s.strSlow(start)
		case c < 0x20:
			return nil, s.errf("control character 0x%02x in string", c)
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n == 1 {
				return nil, s.errf("invalid UTF-8 in string")
			}
			s.i += n
		}
	}
	return nil, s.errf("unterminated string")
}

func (s *scanner) strSlow(start int) ([]byte, error) {
	s.escaped = true
	out := append(s.scratch[:0], s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			s.scratch = out
			return out, nil
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return nil, s.errf("unterminated string")
			}
			e := s.b[s.i+1]
			s.i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := s.hex4()
				if !ok {
					return nil, s.errf("bad \\u escape")
				}
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
						s.i += 2
						if r2, ok = s.hex4(); !ok {
							return nil, s.errf("bad \\u escape")
						}
					}
					r = utf16.DecodeRune(r, r2)
					if r == utf8.RuneError && r2 >= 0 && !utf16.IsSurrogate(r2) {
						out = utf8.AppendRune(out, utf8.RuneError)
						r = r2
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, s.errf("bad escape \\%c", e)
			}
		case c < 0x20:
			return nil, s.errf("control character 0x%02x in string", c)
		case c < utf8.RuneSelf:
			out = append(out, c)
			s.i++
		default:
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n == 1 {
				return nil, s.errf("invalid UTF-8 in string")
			}
			out = append(out, s.b[s.i:s.i+n]...)
			s.i += n
		}
	}
	return nil, s.errf("unterminated string")
}

func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[s.i : s.i+4] {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	s.i += 4
	return r, true
}

// num is a JSON number as the scanner reads it: its literal and, in the same
// pass, its decimal value, ±man × 10^exp10 (exact unless trunc).
type num struct {
	lit   []byte
	man   uint64 // the significant digits, as many as fit in a uint64
	exp10 int    // clamped to ±maxExp10: beyond it every float is 0 or ±Inf
	neg   bool
	isInt bool // no fraction and no exponent
	trunc bool // more significant digits than a uint64 holds: man is not exact
}

const (
	manCutoff = math.MaxUint64 / 10 // man*10 + d fits when man < manCutoff, or == and d <= 5
	maxExp10  = 1 << 14
)

// fits reports whether man*10 + d fits in a uint64.
func fits(man, d uint64) bool {
	return man < manCutoff || (man == manCutoff && d <= math.MaxUint64%10)
}

// number reads a JSON number literal (RFC 8259: no leading zeros, no '+', no
// bare '.') into n. The digits are accumulated as they are checked, so
// converting n (n.float32, n.float64, n.int64) does not read the literal again.
func (s *scanner) number(n *num) error {
	s.ws()
	b := s.b
	i := s.i
	*n = num{isInt: true}
	if i < len(b) && b[i] == '-' {
		n.neg = true
		i++
	}
	var man uint64
	exp := 0      // the decimal exponent of man's last digit
	full := false // man took all the digits it can: the rest are dropped
	if i >= len(b) {
		s.i = i
		return s.errf("want a number")
	}
	switch c := b[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		for ; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
			if d := uint64(b[i] - '0'); !full && fits(man, d) {
				man = man*10 + d
			} else {
				full = true
				exp++ // a dropped integer digit still scales the value
				if b[i] != '0' {
					n.trunc = true
				}
			}
		}
	default:
		s.i = i
		return s.errf("want a number")
	}
	if i < len(b) && b[i] == '.' {
		n.isInt = false
		i++
		start := i
		for ; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
			switch d := uint64(b[i] - '0'); {
			case man == 0 && d == 0:
				exp-- // a leading zero of the fraction
			case !full && fits(man, d):
				man = man*10 + d
				exp--
			default:
				full = true
				n.trunc = n.trunc || d != 0
			}
		}
		if i == start {
			s.i = i
			return s.errf("want a digit after '.'")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		n.isInt = false
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		start := i
		e := 0
		for ; i < len(b) && '0' <= b[i] && b[i] <= '9'; i++ {
			if e < maxExp10 {
				e = e*10 + int(b[i]-'0')
			}
		}
		if i == start {
			s.i = i
			return s.errf("want a digit in the exponent")
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	n.lit = b[s.i:i]
	n.man = man
	n.exp10 = max(-maxExp10, min(exp, maxExp10))
	s.i = i
	return nil
}

// literal consumes word (true, false, null) if it is next.
func (s *scanner) literal(word string) bool {
	s.ws()
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// skip consumes one value of any kind.
func (s *scanner) skip(depth int) error {
	if depth > maxDepth {
		return s.errf("nested deeper than %d levels", maxDepth)
	}
	switch c := s.peek(); c {
	case '{':
		s.i++
		var seen keySet
		for first := true; ; first = false {
			ok, err := s.more('}', first)
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			if _, err := s.key(&seen); err != nil {
				return err
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
		}
	case '[':
		s.i++
		for first := true; ; first = false {
			ok, err := s.more(']', first)
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
		}
	case '"':
		_, err := s.str()
		return err
	case 't':
		if s.literal("true") {
			return nil
		}
	case 'f':
		if s.literal("false") {
			return nil
		}
	case 'n':
		if s.literal("null") {
			return nil
		}
	case 0:
		return s.errf("unexpected end of input, want a value")
	default:
		if c == '-' || ('0' <= c && c <= '9') {
			var n num
			return s.number(&n)
		}
	}
	return s.errf("want a value, got %q", s.b[s.i])
}
