package kserve

import (
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
	scratch []byte // unescaped strings that had escapes
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

// key reads an object key and the ':' after it.
func (s *scanner) key() ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.errf("want an object key (a string)")
	}
	k, err := s.str()
	if err != nil {
		return nil, err
	}
	return k, s.expect(':')
}

// str reads a JSON string at the current position (which must be '"') and returns
// its unescaped bytes: a subslice of the input when it has no escapes, else a
// slice of s.scratch valid until the next call to str.
func (s *scanner) str() ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.errf("want a string")
	}
	s.i++
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

// number reads a JSON number literal and returns its bytes; isInt reports that it
// has neither a fraction nor an exponent.
func (s *scanner) number() (lit []byte, isInt bool, err error) {
	s.ws()
	start := s.i
	isInt = true
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(s.b) {
		return nil, false, s.errf("want a number")
	}
	switch c := s.b[s.i]; {
	case c == '0':
		s.i++
	case '1' <= c && c <= '9':
		for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
			s.i++
		}
	default:
		return nil, false, s.errf("want a number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		isInt = false
		s.i++
		d := s.i
		for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
			s.i++
		}
		if s.i == d {
			return nil, false, s.errf("want a digit after '.'")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		isInt = false
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		d := s.i
		for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
			s.i++
		}
		if s.i == d {
			return nil, false, s.errf("want a digit in the exponent")
		}
	}
	return s.b[start:s.i], isInt, nil
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
		for first := true; ; first = false {
			ok, err := s.more('}', first)
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			if _, err := s.key(); err != nil {
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
			_, _, err := s.number()
			return err
		}
	}
	return s.errf("want a value, got %q", s.b[s.i])
}
