// Package ocrsamples is the OCR sample set of Piccolo: images of known text
// rendered with the Go fonts (golang.org/x/image/font/gofont) at several sizes,
// slight rotations (and two upside down) and several backgrounds, made when
// asked so that nothing binary is committed. The same Samples always render to
// the same pixels, so accuracy figures are reproducible. HardSamples is a
// harder set (small fonts, blur, noise, low contrast, long lines) on which the
// OCR model variants differ (docs/variants.md); WriteSet writes a set as a
// labelled directory for `piccolo profile --accuracy`.
//
// Tests read them, and so does `piccolo demo` (internal/demo): this package is
// not a test helper, it imports no testing, and the binary links it without
// linking testing (internal/ocrtest keeps what only tests use).
//
// Everything here is a pure function of its arguments and safe for concurrent use.
package ocrsamples

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/piccolo-serving/piccolo/profiler"
	"golang.org/x/image/draw"
	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/gomedium"
	"golang.org/x/image/font/gofont/gomono"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/f64"
	"golang.org/x/image/math/fixed"
)

// Sample is one test image: the text it shows and how it is rendered.
type Sample struct {
	Name       string   `json:"name"`       // file name, e.g. "03-bold-32px-rot2.png"
	Lines      []string `json:"lines"`      // the text, top line first
	Font       string   `json:"font"`       // regular, bold, medium, mono
	SizePx     float64  `json:"size_px"`    // font size in pixels
	RotateDeg  float64  `json:"rotate_deg"` // counter-clockwise rotation of the text, degrees
	Background string   `json:"background"` // white, paper, gray, gradient, grid, dark
	// The hard set's degradations (HardSamples); zero: none.
	Blur     int     `json:"blur,omitempty"`     // box blur radius, px
	Noise    float64 `json:"noise,omitempty"`    // Gaussian noise σ, of 255
	Contrast float64 `json:"contrast,omitempty"` // text color this share of the way from the background to the foreground (0: full)
}

// Samples returns the fixed test set: 24 samples, 28 lines, 72 words.
func Samples() []Sample {
	type s = Sample
	list := []Sample{
		{Lines: []string{"HELLO WORLD 2026"}, Font: "regular", SizePx: 32, Background: "white"},
		{Lines: []string{"Piccolo gateway"}, Font: "bold", SizePx: 36, Background: "white"},
		{Lines: []string{"batching load balancer"}, Font: "regular", SizePx: 24, Background: "paper"},
		{Lines: []string{"Deadline 250 ms"}, Font: "medium", SizePx: 28, RotateDeg: 2, Background: "gray"},
		{Lines: []string{"throughput cost ratio"}, Font: "regular", SizePx: 26, RotateDeg: -3, Background: "gradient"},
		{Lines: []string{"session module slot"}, Font: "mono", SizePx: 24, Background: "grid"},
		{Lines: []string{"ONNX Runtime"}, Font: "bold", SizePx: 40, RotateDeg: 4, Background: "paper"},
		{Lines: []string{"Order 4711 shipped"}, Font: "regular", SizePx: 22, Background: "dark"},
		{Lines: []string{"quick brown fox", "jumps over the lazy dog"}, Font: "regular", SizePx: 28, Background: "white"},
		{Lines: []string{"PRICE 3.06 per hour"}, Font: "medium", SizePx: 30, RotateDeg: -2, Background: "white"},
		{Lines: []string{"Text detection"}, Font: "bold", SizePx: 20, Background: "gradient"},
		{Lines: []string{"direction classifier"}, Font: "regular", SizePx: 34, RotateDeg: 180, Background: "white"},
		{Lines: []string{"recognition model"}, Font: "mono", SizePx: 30, RotateDeg: 3, Background: "paper"},
		{Lines: []string{"Room 42B", "Floor 7"}, Font: "bold", SizePx: 36, Background: "gray"},
		{Lines: []string{"WELCOME"}, Font: "regular", SizePx: 48, RotateDeg: -4, Background: "grid"},
		{Lines: []string{"invoice total 1280"}, Font: "medium", SizePx: 18, Background: "white"},
		{Lines: []string{"green light ahead"}, Font: "regular", SizePx: 30, Background: "dark"},
		{Lines: []string{"Monday 09:30", "Friday 17:45"}, Font: "mono", SizePx: 26, RotateDeg: 1, Background: "paper"},
		{Lines: []string{"open source software"}, Font: "bold", SizePx: 28, RotateDeg: 180, Background: "gradient"},
		{Lines: []string{"Exit"}, Font: "bold", SizePx: 44, Background: "white"},
		{Lines: []string{"coffee and tea"}, Font: "regular", SizePx: 20, RotateDeg: -1, Background: "gray"},
		{Lines: []string{"Model 7 ready", "Queue empty"}, Font: "medium", SizePx: 24, Background: "grid"},
		{Lines: []string{"latency budget"}, Font: "regular", SizePx: 38, RotateDeg: 2, Background: "white"},
		{Lines: []string{"SPEED LIMIT 60"}, Font: "bold", SizePx: 32, Background: "paper"},
	}
	out := make([]s, len(list))
	for i, x := range list {
		x.Name = fmt.Sprintf("%02d-%s-%gpx-rot%g-%s.png", i+1, x.Font, x.SizePx, x.RotateDeg, x.Background)
		out[i] = x
	}
	return out
}

// Words returns the words of the sample's text, in reading order.
func (s Sample) Words() []string { return strings.Fields(strings.Join(s.Lines, " ")) }

var fonts = map[string][]byte{
	"regular": goregular.TTF,
	"bold":    gobold.TTF,
	"medium":  gomedium.TTF,
	"mono":    gomono.TTF,
}

// Render draws the sample: dark text (light on "dark") with a margin of about
// one text height, rotated by RotateDeg about its center on a canvas large
// enough to hold it, over the background.
func Render(s Sample) (*image.RGBA, error) {
	ttf, ok := fonts[s.Font]
	if !ok {
		return nil, fmt.Errorf("sample %s: font %q; allowed: bold, medium, mono, regular", s.Name, s.Font)
	}
	if s.SizePx < 6 || s.SizePx > 200 {
		return nil, fmt.Errorf("sample %s: size %v px; want 6 to 200", s.Name, s.SizePx)
	}
	if len(s.Lines) == 0 {
		return nil, fmt.Errorf("sample %s: no text", s.Name)
	}
	f, err := opentype.Parse(ttf)
	if err != nil {
		return nil, fmt.Errorf("sample %s: %w", s.Name, err)
	}
	face, err := opentype.NewFace(f, &opentype.FaceOptions{Size: s.SizePx, DPI: 72, Hinting: font.HintingFull})
	if err != nil {
		return nil, fmt.Errorf("sample %s: %w", s.Name, err)
	}
	defer face.Close()
	fg, bg := color.RGBA{20, 20, 30, 255}, background(s.Background)
	if bg == nil {
		return nil, fmt.Errorf("sample %s: background %q; allowed: dark, gradient, gray, grid, paper, white", s.Name, s.Background)
	}
	if s.Background == "dark" {
		fg = color.RGBA{235, 235, 220, 255}
	}
	if s.Contrast > 0 {
		// Blend toward the background's color at the center.
		bc := color.RGBAModel.Convert(bg(3, 3).At(1, 1)).(color.RGBA)
		mix := func(f, b uint8) uint8 { return uint8(float64(b) + s.Contrast*(float64(f)-float64(b))) }
		fg = color.RGBA{mix(fg.R, bc.R), mix(fg.G, bc.G), mix(fg.B, bc.B), 255}
	}

	// The text on a transparent layer.
	m := face.Metrics()
	lineH := (m.Ascent + m.Descent).Ceil()
	gap := int(0.6 * s.SizePx)
	margin := int(1.2 * s.SizePx)
	w := 0
	for _, l := range s.Lines {
		w = max(w, font.MeasureString(face, l).Ceil())
	}
	h := len(s.Lines)*lineH + (len(s.Lines)-1)*gap
	layer := image.NewRGBA(image.Rect(0, 0, w+2*margin, h+2*margin))
	d := &font.Drawer{Dst: layer, Src: image.NewUniform(fg), Face: face}
	for i, l := range s.Lines {
		d.Dot = fixed.P(margin, margin+i*(lineH+gap)+m.Ascent.Ceil())
		d.DrawString(l)
	}

	// Rotate about the center onto a canvas that holds the rotated layer.
	th := s.RotateDeg * math.Pi / 180
	cos, sin := math.Cos(th), math.Sin(th)
	lw, lh := float64(layer.Bounds().Dx()), float64(layer.Bounds().Dy())
	cw := int(math.Ceil(math.Abs(lw*cos) + math.Abs(lh*sin)))
	ch := int(math.Ceil(math.Abs(lw*sin) + math.Abs(lh*cos)))
	out := image.NewRGBA(image.Rect(0, 0, cw, ch))
	draw.Draw(out, out.Bounds(), bg(cw, ch), image.Point{}, draw.Src)
	// Counter-clockwise on screen (y down): x' = cos·x + sin·y, y' = −sin·x + cos·y.
	cx, cy, dx, dy := lw/2, lh/2, float64(cw)/2, float64(ch)/2
	aff := f64.Aff3{
		cos, sin, dx - cos*cx - sin*cy,
		-sin, cos, dy + sin*cx - cos*cy,
	}
	draw.BiLinear.Transform(out, aff, layer, layer.Bounds(), draw.Over, nil)
	degrade(s, out)
	return out, nil
}

// background returns a function drawing the named background of a w×h image,
// or nil for an unknown name.
func background(name string) func(w, h int) image.Image {
	uniform := func(c color.RGBA) func(w, h int) image.Image {
		return func(int, int) image.Image { return image.NewUniform(c) }
	}
	switch name {
	case "white":
		return uniform(color.RGBA{255, 255, 255, 255})
	case "paper":
		return uniform(color.RGBA{245, 236, 210, 255})
	case "gray":
		return uniform(color.RGBA{200, 200, 200, 255})
	case "dark":
		return uniform(color.RGBA{35, 45, 60, 255})
	case "gradient":
		return func(w, h int) image.Image {
			img := image.NewRGBA(image.Rect(0, 0, w, h))
			for x := 0; x < w; x++ {
				t := float64(x) / float64(max(w-1, 1))
				c := color.RGBA{uint8(200 + 55*t), uint8(220 + 35*t), 255, 255}
				for y := 0; y < h; y++ {
					img.SetRGBA(x, y, c)
				}
			}
			return img
		}
	case "grid":
		return func(w, h int) image.Image {
			img := image.NewRGBA(image.Rect(0, 0, w, h))
			for y := 0; y < h; y++ {
				for x := 0; x < w; x++ {
					c := color.RGBA{250, 250, 250, 255}
					if x%16 == 0 || y%16 == 0 {
						c = color.RGBA{190, 210, 235, 255}
					}
					img.SetRGBA(x, y, c)
				}
			}
			return img
		}
	}
	return nil
}

// EncodePNG renders the sample and encodes it as PNG.
func EncodePNG(s Sample) ([]byte, error) {
	img, err := Render(s)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("sample %s: %w", s.Name, err)
	}
	return buf.Bytes(), nil
}

// Write renders every sample into dir as PNG, with manifest.json listing the
// samples and their expected text, and returns the samples.
func Write(dir string) ([]Sample, error) {
	samples := Samples()
	return samples, WriteSet(dir, samples)
}

// WriteSet renders samples into dir as PNG, with manifest.json (the samples)
// and profiler.LabelsFile: a labelled set for `piccolo profile --accuracy`.
func WriteSet(dir string, samples []Sample) error {
	var labels bytes.Buffer
	for _, s := range samples {
		b, err := EncodePNG(s)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, s.Name), b, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&labels, "%s\t%s\n", s.Name, strings.Join(s.Lines, " "))
	}
	manifest, err := json.MarshalIndent(samples, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), append(manifest, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, profiler.LabelsFile), labels.Bytes(), 0o644)
}
