package ocrsamples

import (
	"fmt"
	"image"
	"image/color"
	"math/rand/v2"
	"strings"
)

// hardPhrases are the texts of the hard set: short words, numbers, mixed case
// and long lines.
var hardPhrases = []string{
	"total due 4821.75",
	"gate B17 boarding",
	"quiet zone",
	"serial 7731-A9",
	"keep door closed at all times",
	"valid until 2027",
	"the planner picks the cheapest plan",
	"milk eggs bread apples",
	"route 66 west",
	"batch size sixteen",
	"lot 55 row 12 seat 9",
	"small print applies here",
	"Warning high voltage",
	"press start to continue",
	"version 3.14.159",
	"north tower level 4",
	"accuracy target ninety five",
	"please wait for the green light",
	"frame rate 29.97 fps",
	"Monday to Friday 8 to 18",
	"shipping label 0042",
	"read the manual first",
	"line seven of the long report was cut",
	"cost units per machine hour",
	"fresh fish daily",
	"temperature 21 degrees",
	"exit only no entry",
	"model variants differ in cost",
	"order 9123 ready for pickup",
	"caution wet floor",
	"the quick brown fox jumps over the lazy dog again",
	"zone C parking",
	"room 204 meeting at noon",
	"invoice number 55012 paid",
	"handle with care",
	"deadline extended to friday",
	"small text is hard to read",
	"platform 3 departures",
	"speed 88 km per hour",
	"text detection on a noisy page",
}

// HardSamples returns the hard test set: 40 samples, 170 words, on which the
// full-size OCR models read about 95% of the words and smaller or squeezed
// variants clearly fewer (docs/variants.md). Each sample draws from a fixed
// pseudo-random stream (PCG, seed 13) a font, a size (a quarter at 12–14 px,
// long phrases at 14–18 px, the rest 16–36 px), a rotation within ±3°, a
// background (white twice as often: the grid made even the full-size
// detector merge words), and some of blur (box radius 1, a quarter), noise (σ
// 6–14 of 255, a third) and low contrast (text at 60–90% of the way from the
// background to black, a quarter). Phrases longer than hardLineChars wrap
// onto more lines. The same call always renders the same pixels.
func HardSamples() []Sample {
	r := rand.New(rand.NewPCG(13, 13))
	fontNames := []string{"regular", "bold", "medium", "mono"}
	backgrounds := []string{"white", "paper", "gray", "gradient", "white"}
	out := make([]Sample, len(hardPhrases))
	for i, p := range hardPhrases {
		s := Sample{Lines: wrap(p, hardLineChars), Font: fontNames[r.IntN(len(fontNames))], Background: backgrounds[r.IntN(len(backgrounds))]}
		switch {
		case i%4 == 0:
			s.SizePx = float64(12 + r.IntN(3))
		case len(p) > 28:
			s.SizePx = float64(14 + r.IntN(5))
		default:
			s.SizePx = float64(16 + r.IntN(21))
		}
		s.RotateDeg = float64(r.IntN(7) - 3)
		if r.IntN(4) == 0 {
			s.Blur = 1
		}
		if r.IntN(3) == 0 {
			s.Noise = float64(6 + r.IntN(9))
		}
		if r.IntN(4) == 0 {
			s.Contrast = 0.6 + 0.05*float64(r.IntN(7))
		}
		s.Name = fmt.Sprintf("hard-%02d-%s-%gpx-rot%g-b%d-n%g-c%g-%s.png", i+1, s.Font, s.SizePx, s.RotateDeg, s.Blur, s.Noise, s.Contrast, s.Background)
		out[i] = s
	}
	return out
}

// hardLineChars is the longest line of the hard set, in characters. The
// recognizer reads a crop of at most 48×320 px (one line), so a longer line is
// squeezed until its spaces vanish even for the full-size models; the hard set
// wraps its long phrases onto lines of at most this many characters.
const hardLineChars = 20

// wrap breaks text at spaces into lines of at most n characters (a longer word
// stays whole on its own line).
func wrap(text string, n int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		switch {
		case line == "":
			line = w
		case len(line)+1+len(w) <= n:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	return append(lines, line)
}

// degrade applies s's blur, then noise, to img in place. The noise stream is
// seeded by the sample's name, so a sample always renders to the same pixels.
func degrade(s Sample, img *image.RGBA) {
	if s.Blur > 0 {
		boxBlur(img, s.Blur)
	}
	if s.Noise > 0 {
		var seed uint64
		for _, c := range s.Name {
			seed = seed*131 + uint64(c)
		}
		r := rand.New(rand.NewPCG(seed, 7))
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := img.RGBAAt(x, y)
				n := r.NormFloat64() * s.Noise
				img.SetRGBA(x, y, color.RGBA{clamp8(float64(c.R) + n), clamp8(float64(c.G) + n), clamp8(float64(c.B) + n), 255})
			}
		}
	}
}

// boxBlur averages every pixel with its (2r+1)² neighbourhood (edges clamped).
func boxBlur(img *image.RGBA, r int) {
	b := img.Bounds()
	src := image.NewRGBA(b)
	copy(src.Pix, img.Pix)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			var sr, sg, sb, n float64
			for dy := -r; dy <= r; dy++ {
				for dx := -r; dx <= r; dx++ {
					px, py := min(max(x+dx, b.Min.X), b.Max.X-1), min(max(y+dy, b.Min.Y), b.Max.Y-1)
					c := src.RGBAAt(px, py)
					sr, sg, sb, n = sr+float64(c.R), sg+float64(c.G), sb+float64(c.B), n+1
				}
			}
			img.SetRGBA(x, y, color.RGBA{uint8(sr / n), uint8(sg / n), uint8(sb / n), 255})
		}
	}
}

func clamp8(v float64) uint8 {
	return uint8(min(max(v+0.5, 0), 255))
}
