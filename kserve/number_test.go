package kserve

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
)

// scanNum scans lit as the decoder does.
func scanNum(t testing.TB, lit string) num {
	t.Helper()
	s := scanner{b: []byte(lit)}
	var n num
	if err := s.number(&n); err != nil || s.i != len(lit) {
		t.Fatalf("scan %q: %v (stopped at %d)", lit, err, s.i)
	}
	return n
}

// checkFloats compares n.float32 and n.float64 with strconv.ParseFloat, the
// correctly rounded reference, bit for bit (so -0 and ties count).
func checkFloats(t testing.TB, lit string) {
	t.Helper()
	n := scanNum(t, lit)
	want32, err32 := strconv.ParseFloat(lit, 32)
	got32, ok32 := n.float32()
	if ok32 != (err32 == nil) || (ok32 && math.Float32bits(got32) != math.Float32bits(float32(want32))) {
		t.Errorf("float32(%s) = %v (%08x), ok %v; strconv: %v (%08x), %v", lit, got32, math.Float32bits(got32), ok32, float32(want32), math.Float32bits(float32(want32)), err32)
	}
	want64, err64 := strconv.ParseFloat(lit, 64)
	got64, ok64 := n.float64()
	if ok64 != (err64 == nil) || (ok64 && math.Float64bits(got64) != math.Float64bits(want64)) {
		t.Errorf("float64(%s) = %v, ok %v; strconv: %v, %v", lit, got64, ok64, want64, err64)
	}
}

func TestNumberConversions(t *testing.T) {
	for _, lit := range []string{
		"0", "-0", "0.0", "-0.0", "0e5", "1", "-1", "0.1", "0.25", "1.5", "3.4028235e38", "3.4028236e38", "-3.5e38", "1e39",
		"1e-45", "1.4e-45", "7e-46", "1e-46", "1.17549435e-38", "1e-38", "123456789012345678901234567890",
		"0.000000000000000000000000000001", "1.00000005960464477539062500000001", "1.000000059604644775390625",
		"1.0000000596046447753906249999999", "16777217", "16777216.5", "9007199254740993", "18446744073709551615",
		"18446744073709551616", "1e22", "1e23", "1e-22", "1e-23", "4.9e-324", "2.5e-324", "1.7976931348623157e308", "1.8e308",
		"0.48500001430511475", "0.83412546", "1E+2", "1e-2", "12.5e-1", "100000000000000000000000e-20",
	} {
		checkFloats(t, lit)
	}
}

// TestNumberConversionsRandom compares, against strconv, decimals a client
// writes: float32s printed shortest and as float64 (what Python's json
// writes for a numpy float32), random digits, and decimals at a hair from
// float32 midpoints (where rounding through float64 first goes wrong).
func TestNumberConversionsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200000 {
		f := math.Float32frombits(r.Uint32())
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			continue
		}
		checkFloats(t, strconv.FormatFloat(float64(f), 'g', -1, 32))
		checkFloats(t, strconv.FormatFloat(float64(f), 'g', -1, 64))
		g := r.Float32()
		checkFloats(t, strconv.FormatFloat(float64(g), 'g', -1, 64))
		// The midpoint between g and its successor, exactly, then nudged.
		mid := (float64(g) + float64(math.Nextafter32(g, 2))) / 2
		m := strconv.FormatFloat(mid, 'f', -1, 64)
		checkFloats(t, m)
		checkFloats(t, m+"000000001")
		digits := strconv.FormatUint(r.Uint64()>>r.IntN(64), 10)
		checkFloats(t, digits+"e"+strconv.Itoa(r.IntN(80)-40))
		if len(digits) > 1 {
			checkFloats(t, digits[:1]+"."+digits[1:]+"e"+strconv.Itoa(r.IntN(80)-40))
		}
	}
}

func TestNumberIntegers(t *testing.T) {
	for _, tc := range []struct {
		lit string
		i   int64
		iOK bool
		u   uint64
		uOK bool
	}{
		{"0", 0, true, 0, true},
		{"-0", 0, true, 0, true},
		{"-1", -1, true, 0, false},
		{"9223372036854775807", math.MaxInt64, true, math.MaxInt64, true},
		{"9223372036854775808", 0, false, 1 << 63, true},
		{"-9223372036854775808", math.MinInt64, true, 0, false},
		{"-9223372036854775809", 0, false, 0, false},
		{"18446744073709551615", 0, false, math.MaxUint64, true},
		{"18446744073709551616", 0, false, 0, false},
		{"184467440737095516150", 0, false, 0, false},
		{"1.0", 0, false, 0, false},
		{"1e2", 0, false, 0, false},
	} {
		n := scanNum(t, tc.lit)
		if i, ok := n.int64(); ok != tc.iOK || i != tc.i {
			t.Errorf("int64(%s) = %d, %v; want %d, %v", tc.lit, i, ok, tc.i, tc.iOK)
		}
		if u, ok := n.uint64(); ok != tc.uOK || u != tc.u {
			t.Errorf("uint64(%s) = %d, %v; want %d, %v", tc.lit, u, ok, tc.u, tc.uOK)
		}
	}
}

// FuzzNumber checks the scanner's one-pass conversions against strconv for
// any literal the scanner accepts as a whole JSON number.
func FuzzNumber(f *testing.F) {
	for _, lit := range []string{"0", "-0", "1.5", "1.00000005960464477539062500000001", "3.4028236e38", "1e-46", "18446744073709551615", "0.48500001430511475"} {
		f.Add(lit)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		s := scanner{b: []byte(lit)}
		var n num
		if err := s.number(&n); err != nil || s.i != len(lit) || string(n.lit) != lit {
			return // not one number, or with leading space (which the scanner skips)
		}
		checkFloats(t, lit)
		if i, ok := n.int64(); ok {
			if want, err := strconv.ParseInt(lit, 10, 64); err != nil || want != i {
				t.Errorf("int64(%s) = %d; strconv: %d, %v", lit, i, want, err)
			}
		}
	})
}

// refRound rounds the decimal lit to prec significant bits, ties to even,
// exactly (big.Rat to big.Float): the reference for FP16 (11 bits) and BF16
// (8 bits) in their normal range.
func refRound(t *testing.T, lit string, prec uint) float64 {
	t.Helper()
	x, ok := new(big.Rat).SetString(lit)
	if !ok {
		t.Fatalf("big.Rat %q", lit)
	}
	f, _ := new(big.Float).SetPrec(prec).SetMode(big.ToNearestEven).SetRat(x).Float64()
	return f
}

// TestHalfAndBF16RoundedOnce compares FP16 and BF16 conversions with exact
// rounding on decimals at and beside the narrower types' ties, where going
// through float32 first rounds twice.
func TestHalfAndBF16RoundedOnce(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	check := func(lit string) {
		t.Helper()
		n := scanNum(t, lit)
		f, ok := n.float32()
		if !ok {
			return
		}
		if a := math.Abs(float64(f)); a >= 0x1p-14 && a <= 65504 {
			got := float64(api.Float16Value(n.roundOnce(f, api.Float16Bits)))
			if want := refRound(t, lit, 11); got != want {
				t.Errorf("FP16(%s) = %v, want %v", lit, got, want)
			}
		}
		if a := math.Abs(float64(f)); a >= 0x1p-126 && a < 3e38 {
			got := float64(api.BFloat16Value(n.roundOnce(f, api.BFloat16Bits)))
			if want := refRound(t, lit, 8); got != want {
				t.Errorf("BF16(%s) = %v, want %v", lit, got, want)
			}
		}
	}
	for _, lit := range []string{"1.000488281250001", "1.00048828125", "1.000488281249999", "1.0039062500000001", "1.00390625", "0.1", "-2.5"} {
		check(lit)
	}
	for range 20000 {
		h := uint16(r.IntN(0x7bff-0x0400) + 0x0400) // a normal FP16
		lo := float64(api.Float16Value(h))
		mid := (lo + float64(api.Float16Value(h+1))) / 2
		m := strconv.FormatFloat(mid, 'f', -1, 64)
		check(m)
		check(m + "0000000001")
		check(strconv.FormatFloat(mid-mid*1e-15, 'g', 17, 64))
		b := uint32(r.IntN(0x7f00-0x0080)+0x0080) << 16 // a normal BF16
		bmid := (float64(math.Float32frombits(b)) + float64(math.Float32frombits(b+1<<16))) / 2
		bm := strconv.FormatFloat(bmid, 'g', -1, 64)
		check(bm)
		check(strconv.FormatFloat(bmid+bmid*1e-15, 'g', 17, 64))
	}
}
