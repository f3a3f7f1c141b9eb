package api

import "math"

// Half-precision conversions for FP16 and BF16 tensor data, used by the
// gateway's JSON codec (kserve, whose roundOnce also settles a decimal that
// lies beside a tie exactly) and the load generator (loadgen): one rule for
// both. Written here rather than taken from a library because the usual ones
// (x448/float16) convert from float32 only, and going float64 → float32 →
// half rounds twice, wrong for values just above a half-way point
// (1 + 2⁻¹¹ + 2⁻⁴⁰ must give 1 + 2⁻¹⁰, not 1). TestFloat16 checks every half
// value and every half-way point between two; TestHalfCases NaN, ±Inf,
// overflow and subnormals.

// Float16Bits returns f as IEEE 754 binary16 (FP16) bits, rounded once to
// nearest, ties to even. Magnitudes at or above 65520 give ±Inf; below 2⁻²⁵
// (half the least subnormal) ±0; a NaN gives the quiet NaN 0x7e00 with f's
// sign.
func Float16Bits(f float64) uint16 { return uint16(narrow(f, 5, 10)) }

// BFloat16Bits returns f as bfloat16 (BF16) bits: float32's exponent range,
// 7 stored mantissa bits; rounded once to nearest, ties to even. Magnitudes
// at or above 3.3961e38 give ±Inf; a NaN gives the quiet NaN 0x7fc0 with f's
// sign.
func BFloat16Bits(f float64) uint16 { return uint16(narrow(f, 8, 7)) }

// Float16Value returns the value of binary16 bits h (exact: every FP16
// value is a float32).
func Float16Value(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		for mant&0x400 == 0 {
			mant <<= 1
			exp--
		}
		exp++
		mant &= 0x3ff
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// BFloat16Value returns the value of bfloat16 bits h (exact).
func BFloat16Value(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// narrow rounds f to a binary format of e exponent and m stored mantissa
// bits (IEEE 754 layout, sign on top) and returns its bits.
func narrow(f float64, e, m uint) uint64 {
	b := math.Float64bits(f)
	sign := b >> 63 << (e + m)
	expMask := uint64(1)<<e - 1
	inf := sign | expMask<<m
	switch {
	case f != f:
		return inf | 1<<(m-1) // quiet NaN
	case math.IsInf(f, 0):
		return inf
	}
	e64 := int(b>>52) & 0x7ff
	if e64 == 0 {
		return sign // zero, or a float64 subnormal: far below any subnormal here
	}
	bias := int(expMask >> 1)
	ue := e64 - 1023 // unbiased exponent
	if ue > bias {
		return inf
	}
	sig := uint64(1)<<52 | b&(1<<52-1) // 53 significant bits
	shift := 52 - int(m)
	if emin := 1 - bias; ue < emin {
		shift += emin - ue // a subnormal: fewer bits left
		if shift > 60 {
			return sign
		}
	}
	q := sig >> shift
	rem, mid := sig&(1<<shift-1), uint64(1)<<(shift-1)
	if rem > mid || rem == mid && q&1 == 1 {
		q++
	}
	if ue < 1-bias {
		return sign | q // a carry into bit m is the least normal: still right
	}
	bits := uint64(ue+bias-1)<<m + q // q carries the implicit bit, and any carry, into the exponent
	if bits >= expMask<<m {
		return inf
	}
	return sign | bits
}
