package api

import (
	"math"
	"testing"
)

// TestFloat16 checks Float16Bits against IEEE 754 binary16 as defined: every
// finite half value converts back to itself; a value half-way between two
// neighbours goes to the even one, and a hair either side to the nearer one
// (subnormals included).
func TestFloat16(t *testing.T) {
	for h := 0; h < 0x7c00; h++ { // every finite positive half, then its negative
		for _, s := range []uint16{0, 0x8000} {
			want := uint16(h) | s
			v := float64(Float16Value(want))
			if got := Float16Bits(v); got != want {
				t.Fatalf("Float16Bits(%g) = %#04x, want %#04x", v, got, want)
			}
		}
		if h == 0x7bff {
			break
		}
		lo, hi := float64(Float16Value(uint16(h))), float64(Float16Value(uint16(h+1)))
		mid := (lo + hi) / 2 // exact in float64
		even := uint16(h)
		if h&1 == 1 {
			even = uint16(h + 1)
		}
		if got := Float16Bits(mid); got != even {
			t.Fatalf("Float16Bits(%g), half-way between %#04x and %#04x = %#04x, want the even %#04x", mid, h, h+1, got, even)
		}
		if got := Float16Bits(math.Nextafter(mid, 0)); got != uint16(h) {
			t.Fatalf("Float16Bits(just below %g) = %#04x, want %#04x", mid, got, h)
		}
		if got := Float16Bits(math.Nextafter(mid, math.Inf(1))); got != uint16(h+1) {
			t.Fatalf("Float16Bits(just above %g) = %#04x, want %#04x", mid, got, h+1)
		}
	}
}

// TestHalfCases checks both conversions on the IEEE 754 cases by name:
// overflow, ±Inf, quiet NaNs keeping their sign, subnormals, ties to even,
// and one rounding, not two. Every result converts back to itself.
func TestHalfCases(t *testing.T) {
	type format struct {
		bits  func(float64) uint16
		value func(uint16) float32
	}
	fp16, bf16 := format{Float16Bits, Float16Value}, format{BFloat16Bits, BFloat16Value}
	for _, c := range []struct {
		name string
		f    format
		in   float64
		want uint16
	}{
		{"FP16 one", fp16, 1, 0x3c00},
		{"FP16 minus two", fp16, -2, 0xc000},
		{"FP16 largest", fp16, 65504, 0x7bff},
		{"FP16 just below overflow", fp16, 65519.99, 0x7bff},
		{"FP16 overflow", fp16, 65520, 0x7c00},
		{"FP16 minus overflow", fp16, -1e10, 0xfc00},
		{"FP16 +Inf", fp16, math.Inf(1), 0x7c00},
		{"FP16 -Inf", fp16, math.Inf(-1), 0xfc00},
		{"FP16 NaN", fp16, math.NaN(), 0x7e00},
		{"FP16 -NaN", fp16, math.Copysign(math.NaN(), -1), 0xfe00},
		{"FP16 least subnormal", fp16, 0x1p-24, 0x0001},
		{"FP16 half the least subnormal: tie to zero", fp16, 0x1p-25, 0x0000},
		{"FP16 above half the least subnormal", fp16, 0x1.0001p-25, 0x0001},
		{"FP16 largest subnormal", fp16, 0x3ffp-24, 0x03ff},
		{"FP16 subnormal rounding up to the least normal", fp16, 0x3ff.8p-24, 0x0400},
		{"FP16 tiny negative", fp16, -1e-300, 0x8000},
		{"FP16 float64 subnormal", fp16, 5e-324, 0x0000},
		// Rounded through float32 first, this gives 1 (0x3c00): twice rounded.
		{"FP16 once rounded", fp16, 1 + 0x1p-11 + 0x1p-40, 0x3c01},
		{"BF16 one", bf16, 1, 0x3f80},
		{"BF16 minus two", bf16, -2, 0xc000},
		{"BF16 pi", bf16, math.Pi, 0x4049},
		{"BF16 tie to even, down", bf16, 1 + 0x1p-8, 0x3f80},
		{"BF16 tie to even, up", bf16, 1 + 3*0x1p-8, 0x3f82},
		{"BF16 largest", bf16, 0x1.fep127, 0x7f7f},
		{"BF16 overflow", bf16, 0x1.ffp127, 0x7f80},
		{"BF16 float32 max", bf16, math.MaxFloat32, 0x7f80},
		{"BF16 +Inf", bf16, math.Inf(1), 0x7f80},
		{"BF16 NaN", bf16, math.NaN(), 0x7fc0},
		{"BF16 -NaN", bf16, math.Copysign(math.NaN(), -1), 0xffc0},
		{"BF16 least subnormal", bf16, 0x1p-133, 0x0001},
		{"BF16 below half the least subnormal", bf16, 0x1p-135, 0x0000},
	} {
		if got := c.f.bits(c.in); got != c.want {
			t.Errorf("%s: %g gives %#04x, want %#04x", c.name, c.in, got, c.want)
		}
		if v := float64(c.f.value(c.want)); v == v && !math.IsInf(v, 0) && c.f.bits(v) != c.want {
			t.Errorf("%s: %#04x does not convert back to itself: %#04x", c.name, c.want, c.f.bits(v))
		}
	}
}
