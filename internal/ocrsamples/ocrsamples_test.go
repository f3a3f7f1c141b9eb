package ocrsamples

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

func TestSamples(t *testing.T) {
	samples := Samples()
	if len(samples) != 24 {
		t.Fatalf("%d samples; want 24", len(samples))
	}
	seen := map[string]bool{}
	words := 0
	for _, s := range samples {
		if seen[s.Name] {
			t.Errorf("duplicate name %s", s.Name)
		}
		seen[s.Name] = true
		words += len(s.Words())
	}
	if words < 60 {
		t.Errorf("%d words in all; want at least 60 for a meaningful accuracy", words)
	}
}

// TestWriteDeterministicAndSmall: the set renders to the same bytes twice, each
// PNG decodes to at most 640×640 (the det canvas), and the whole set is small.
func TestWriteDeterministicAndSmall(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	samples, err := Write(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Write(b); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, s := range samples {
		x, err := os.ReadFile(filepath.Join(a, s.Name))
		if err != nil {
			t.Fatal(err)
		}
		y, _ := os.ReadFile(filepath.Join(b, s.Name))
		if sha256.Sum256(x) != sha256.Sum256(y) {
			t.Errorf("%s: two renderings differ", s.Name)
		}
		total += len(x)
		img, err := png.Decode(bytes.NewReader(x))
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if r := img.Bounds(); r.Dx() > 640 || r.Dy() > 640 || r.Dx() < 32 || r.Dy() < 32 {
			t.Errorf("%s: %v; want between 32 and 640 on each side", s.Name, r)
		}
	}
	if total > 600<<10 {
		t.Errorf("the set is %d KB; want it small (≤ 600 KB)", total>>10)
	}
	t.Logf("%d images, %d KB", len(samples), total>>10)
	var got []Sample
	m, err := os.ReadFile(filepath.Join(a, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(m, &got); err != nil || len(got) != len(samples) || got[0].Lines[0] != "HELLO WORLD 2026" {
		t.Errorf("manifest: %v, %d samples", err, len(got))
	}
}

func TestRenderErrors(t *testing.T) {
	for _, s := range []Sample{
		{Name: "font", Lines: []string{"a"}, Font: "comic", SizePx: 20, Background: "white"},
		{Name: "size", Lines: []string{"a"}, Font: "bold", SizePx: 2, Background: "white"},
		{Name: "bg", Lines: []string{"a"}, Font: "bold", SizePx: 20, Background: "plaid"},
		{Name: "empty", Font: "bold", SizePx: 20, Background: "white"},
	} {
		if _, err := Render(s); err == nil {
			t.Errorf("%s: Render succeeded; want an error", s.Name)
		}
	}
}

// TestHardSamples: 40 distinct samples that render to the same pixels twice,
// each at most 640×640, with every degradation present somewhere.
func TestHardSamples(t *testing.T) {
	samples := HardSamples()
	if len(samples) != 40 {
		t.Fatalf("%d hard samples; want 40", len(samples))
	}
	seen := map[string]bool{}
	var small, blur, noise, low, long int
	for _, s := range samples {
		if seen[s.Name] {
			t.Errorf("duplicate name %s", s.Name)
		}
		seen[s.Name] = true
		a, err := EncodePNG(s)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := EncodePNG(s)
		if !bytes.Equal(a, b) {
			t.Errorf("%s renders differently twice", s.Name)
		}
		img, err := png.Decode(bytes.NewReader(a))
		if err != nil {
			t.Fatal(err)
		}
		if sz := img.Bounds().Size(); sz.X > 640 || sz.Y > 640 {
			t.Errorf("%s is %v; want at most 640×640", s.Name, sz)
		}
		if s.SizePx <= 14 {
			small++
		}
		if s.Blur > 0 {
			blur++
		}
		if s.Noise > 0 {
			noise++
		}
		if s.Contrast > 0 {
			low++
		}
		if len(s.Lines) > 1 {
			long++ // a long phrase, wrapped
		}
		for _, l := range s.Lines {
			if len(l) > hardLineChars {
				t.Errorf("%s: line %q is longer than %d characters", s.Name, l, hardLineChars)
			}
		}
	}
	t.Logf("hard set: %d small fonts, %d blurred, %d noisy, %d low contrast, %d long phrases", small, blur, noise, low, long)
	if small < 10 || blur < 5 || noise < 5 || low < 5 || long < 5 {
		t.Errorf("hard set lacks a degradation: %d small, %d blur, %d noise, %d low contrast, %d long; want ≥ 10, 5, 5, 5, 5", small, blur, noise, low, long)
	}
}

// TestWriteHardSet writes the hard set as a labelled set (WriteSet) into the
// directory $PICCOLO_HARD_SET, for scripts/variants-live.sh; without it, it
// has nothing to do.
func TestWriteHardSet(t *testing.T) {
	dir := os.Getenv("PICCOLO_HARD_SET")
	if dir == "" {
		t.Skip("PICCOLO_HARD_SET not set: no directory to write the hard set to")
	}
	if err := WriteSet(dir, HardSamples()); err != nil {
		t.Fatal(err)
	}
}
