package api

import (
	"math"
	"testing"
)

// TestFloat16 checks Float16Bits against IEEE 754 binary16 as defined: every
// finite half value converts back to itself; a value half-way between two
// neighbours goes to the even one, and a hair either side to the nearer one;
// NaN, ±Inf, overflow and the subnormal range follow the standard.
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
	for _, c := range []struct {
		name string
		in   float64
		want uint16
	}{
		{"one", 1, 0x3c00},
		{"minus two", -2, 0xc000},
		{"largest", 65504, 0x7bff},
		{"just below overflow", 65519.99, 0x7bff},
		{"overflow", 65520, 0x7c00},
		{"minus overflow", -1e10, 0xfc00},
		{"+Inf", math.Inf(1), 0x7c00},
		{"-Inf", math.Inf(-1), 0xfc00},
		{"NaN", math.NaN(), 0x7e00},
		{"-NaN", math.Copysign(math.NaN(), -1), 0xfe00},
		{"least subnormal", 0x1p-24, 0x0001},
		{"half the least subnormal: tie to zero", 0x1p-25, 0x0000},
		{"above half the least subnormal", 0x1.0001p-25, 0x0001},
		{"largest subnormal", 0x3ffp-24, 0x03ff},
		{"subnormal rounding up to the least normal", 0x3ff.8p-24, 0x0400},
		{"tiny negative", -1e-300, 0x8000},
		{"float64 subnormal", 5e-324, 0x0000},
		// Rounded through float32 first, this gives 1 (0x3c00): twice rounded.
		{"once rounded", 1 + 0x1p-11 + 0x1p-40, 0x3c01},
	} {
		if got := Float16Bits(c.in); got != c.want {
			t.Errorf("%s: Float16Bits(%g) = %#04x, want %#04x", c.name, c.in, got, c.want)
		}
	}
}

// TestBFloat16 checks BFloat16Bits the same way on bfloat16's own cases.
func TestBFloat16(t *testing.T) {
	for _, c := range []struct {
		name string
		in   float64
		want uint16
	}{
		{"one", 1, 0x3f80},
		{"minus two", -2, 0xc000},
		{"pi", math.Pi, 0x4049},
		{"tie to even, down", 1 + 0x1p-8, 0x3f80},
		{"tie to even, up", 1 + 3*0x1p-8, 0x3f82},
		{"largest", 0x1.fep127, 0x7f7f},
		{"overflow", 0x1.ffp127, 0x7f80},
		{"+Inf", math.Inf(1), 0x7f80},
		{"NaN", math.NaN(), 0x7fc0},
		{"-NaN", math.Copysign(math.NaN(), -1), 0xffc0},
		{"least subnormal", 0x1p-133, 0x0001},
		{"below half the least subnormal", 0x1p-135, 0x0000},
		{"float32 max", math.MaxFloat32, 0x7f80},
	} {
		if got := BFloat16Bits(c.in); got != c.want {
			t.Errorf("%s: BFloat16Bits(%g) = %#04x, want %#04x", c.name, c.in, got, c.want)
		}
		if c.in == c.in && !math.IsInf(float64(BFloat16Value(c.want)), 0) {
			if v := float64(BFloat16Value(c.want)); BFloat16Bits(v) != c.want {
				t.Errorf("%s: BFloat16Bits(BFloat16Value(%#04x)) = %#04x", c.name, c.want, BFloat16Bits(v))
			}
		}
	}
}
