package kserve

import (
	"math"
	"math/big"
	"strconv"
)

// The conversions of a scanned number (num) to a tensor element. Each rounds
// once, from the decimal the client wrote to the element's type, as
// strconv.ParseFloat(lit, bits) would; the common case (at most 19
// significant digits and a decimal exponent within ±22) takes one
// float64 multiplication or division instead of re-reading the literal, and
// only what that cannot decide goes to strconv.

// pow10 holds the powers of ten that float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// approx64 returns man × 10^exp10 computed in float64 with at most two
// roundings (man to float64 when over 2^53, and the one operation), so within
// 2 float64 ulps of the exact value; ok is false when exp10 is out of the table.
func (n *num) approx64() (float64, bool) {
	if n.trunc || n.exp10 < -22 || n.exp10 > 22 {
		return 0, false
	}
	f := float64(n.man)
	if n.exp10 < 0 {
		f /= pow10[-n.exp10]
	} else {
		f *= pow10[n.exp10]
	}
	return f, true
}

// float32 returns n rounded once to the nearest float32 (ties to even); ok is
// false when it is beyond ±MaxFloat32 (±Inf). -0 keeps its sign.
func (n *num) float32() (float32, bool) {
	if n.man == 0 && !n.trunc {
		return float32(signed(0, n.neg)), true
	}
	if f, ok := n.approx64(); ok {
		// f is within 2 ulps (float64) of the exact value x. A float32 rounding
		// boundary (a midpoint between two float32s, exactly representable in
		// float64) within 8 ulps of f could lie between f and x; otherwise
		// float32(f) rounds as x does. Midpoints sit where f's 29 low mantissa
		// bits are 1<<28. Subnormal and overflowing float32s go to strconv.
		bits := math.Float64bits(f)
		low := bits & (1<<29 - 1)
		if f >= 0x1p-126 && f <= math.MaxFloat32 && (low < 1<<28-8 || low > 1<<28+8) {
			return float32(signed(f, n.neg)), true
		}
	}
	v, err := strconv.ParseFloat(string(n.lit), 32)
	if err != nil {
		return 0, false
	}
	return float32(v), true
}

// float64 returns n rounded once to the nearest float64; ok is false when it
// is beyond ±MaxFloat64.
func (n *num) float64() (float64, bool) {
	if n.man == 0 && !n.trunc {
		return signed(0, n.neg), true
	}
	if n.man <= 1<<53 {
		if f, ok := n.approx64(); ok {
			return signed(f, n.neg), true // exact operands, one rounding (Clinger's fast path)
		}
	}
	v, err := strconv.ParseFloat(string(n.lit), 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

func signed(f float64, neg bool) float64 {
	if neg {
		return -f
	}
	return f
}

// int64 returns n as an integer; ok is false when n has a fraction or an
// exponent, or is out of int64's range (exp10 is not 0: digits past a uint64
// were dropped). -0 is 0.
func (n *num) int64() (v int64, ok bool) {
	if !n.isInt || n.trunc || n.exp10 != 0 {
		return 0, false
	}
	if n.neg {
		if n.man > 1<<63 {
			return 0, false
		}
		return -int64(n.man), true
	}
	if n.man > math.MaxInt64 {
		return 0, false
	}
	return int64(n.man), true
}

// uint64 returns n as an unsigned integer; ok is false when n has a fraction
// or an exponent, is negative (other than -0) or is over MaxUint64.
func (n *num) uint64() (uint64, bool) {
	if !n.isInt || n.trunc || n.exp10 != 0 || (n.neg && n.man != 0) {
		return 0, false
	}
	return n.man, true
}

// roundOnce converts n to a narrower float type through its correctly
// rounded float32 f (conv: api.Float16Bits or api.BFloat16Bits, which round
// a float64, exactly f here, once) rounding once:
// conv(f) alone rounds twice when f lies exactly on the narrower type's
// rounding boundary (halfway between two of its values) and n does not,
// e.g. 1.000488281250001 is 1 + 2^-11 in float32, a tie for FP16, which
// goes to 1 though n is above it. Then the side n is on decides, by an exact
// comparison of the decimal with f (big.Rat; rare: only on a boundary).
func (n *num) roundOnce(f float32, conv func(float64) uint16) uint16 {
	below := conv(float64(math.Nextafter32(f, float32(math.Inf(-1)))))
	above := conv(float64(math.Nextafter32(f, float32(math.Inf(1)))))
	if below == above {
		return conv(float64(f)) // not a boundary: one rounding
	}
	x, ok := new(big.Rat).SetString(string(n.lit))
	if !ok {
		return conv(float64(f))
	}
	switch x.Cmp(new(big.Rat).SetFloat64(float64(f))) {
	case 1:
		return above
	case -1:
		return below
	}
	return conv(float64(f)) // n is the tie itself: ties to even
}
