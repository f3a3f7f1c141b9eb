package builtin

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // decoders registered for DecodeImage
	_ "image/jpeg"
	_ "image/png"
	"math"
	"os"
	"sort"
	"strings"
	"unicode/utf8"

	"golang.org/x/image/draw"
)

// OCR holds the settings of the OCR processing steps (PaddleOCR v4's; the
// package doc lists the steps and the normalization). The zero value is not
// usable: start from DefaultOCR.
type OCR struct {
	// DetSize is the side of the square det canvas, pixels, a multiple of 32.
	// Larger images are scaled down to fit; smaller ones are not scaled up.
	DetSize int
	// ClsWidth and RecWidth are the widths of the direction-classifier and
	// recognition crops (height CropHeight); a crop's content takes the width its
	// aspect ratio gives, at most this, and the rest is padding.
	ClsWidth, RecWidth int
	// Threshold binarizes the det probability map; BoxThreshold is the least mean
	// probability of a kept text region; UnclipRatio grows each region's
	// rectangle by area·ratio/perimeter on every side; MinSide (pixels) drops
	// smaller regions; MaxBoxes bounds the boxes of one image.
	Threshold, BoxThreshold, UnclipRatio, MinSide float64
	MaxBoxes                                      int
	// FlipThreshold is the least 180° probability of the direction classifier
	// for which a crop is turned over.
	FlipThreshold float64
}

// CropHeight is the height of cls and rec crops, pixels (the models' input height).
const CropHeight = 48

// DefaultOCR returns the settings that read the test set (internal/ocrsamples).
func DefaultOCR() OCR {
	return OCR{
		DetSize: 640, ClsWidth: 192, RecWidth: 320,
		Threshold: 0.3, BoxThreshold: 0.6, UnclipRatio: 2.0, MinSide: 3, MaxBoxes: 50,
		FlipThreshold: 0.9,
	}
}

// Validate checks every setting and names the first one out of range.
func (o OCR) Validate() error {
	switch {
	case o.DetSize < 32 || o.DetSize%32 != 0 || o.DetSize > 4096:
		return fmt.Errorf("det size %d: want a multiple of 32 from 32 to 4096", o.DetSize)
	case o.ClsWidth < 8 || o.ClsWidth > 4096:
		return fmt.Errorf("cls width %d: want 8 to 4096", o.ClsWidth)
	case o.RecWidth < 8 || o.RecWidth%8 != 0 || o.RecWidth > 4096:
		return fmt.Errorf("rec width %d: want a multiple of 8 (the rec model's step) from 8 to 4096", o.RecWidth)
	case !(o.Threshold > 0 && o.Threshold < 1):
		return fmt.Errorf("threshold %v: want 0 < threshold < 1", o.Threshold)
	case !(o.BoxThreshold >= 0 && o.BoxThreshold < 1):
		return fmt.Errorf("box threshold %v: want 0 ≤ box threshold < 1", o.BoxThreshold)
	case !(o.UnclipRatio >= 0 && o.UnclipRatio <= 10):
		return fmt.Errorf("unclip ratio %v: want 0 to 10", o.UnclipRatio)
	case !(o.MinSide >= 0):
		return fmt.Errorf("min side %v: want ≥ 0", o.MinSide)
	case o.MaxBoxes < 1:
		return fmt.Errorf("max boxes %d: want ≥ 1", o.MaxBoxes)
	case !(o.FlipThreshold >= 0 && o.FlipThreshold <= 1):
		return fmt.Errorf("flip threshold %v: want 0 to 1", o.FlipThreshold)
	}
	return nil
}

// ErrBadImage: the bytes are not an image of a known format (PNG, JPEG, GIF) or
// the image is empty.
var ErrBadImage = errors.New("bad image")

// MaxImagePixels bounds the pixels of an image DecodeImage accepts (checked from
// the header, before decoding), so a small file cannot claim a huge image.
const MaxImagePixels = 40 << 20

// DecodeImage decodes a PNG, JPEG or GIF image of at most MaxImagePixels pixels.
// Errors wrap ErrBadImage.
func DecodeImage(b []byte) (image.Image, error) {
	cfg, _, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: %v (allowed formats: png, jpeg, gif)", ErrBadImage, err)
	}
	if cfg.Width < 1 || cfg.Height < 1 || int64(cfg.Width)*int64(cfg.Height) > MaxImagePixels {
		return nil, fmt.Errorf("%w: %d×%d pixels; allowed: 1 to %d pixels", ErrBadImage, cfg.Width, cfg.Height, MaxImagePixels)
	}
	img, format, err := image.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: %v (allowed formats: png, jpeg, gif)", ErrBadImage, err)
	}
	if r := img.Bounds(); r.Dx() < 1 || r.Dy() < 1 {
		return nil, fmt.Errorf("%w: %s image of %d×%d pixels", ErrBadImage, format, r.Dx(), r.Dy())
	}
	return img, nil
}

// Mean color of the det normalization as RGB bytes: what the canvas is padded
// with, so that padding is 0 in the det input.
var padRGB = [3]uint8{104, 116, 124}

// Canvas scales img down to fit a size×size square if it is larger (keeping
// its aspect ratio; bilinear) and draws it at the top left of the square, padded
// with the det mean color. It returns the canvas as RGB bytes (size·size·3, row
// major) and the scale applied (≤ 1).
func Canvas(img image.Image, size int, dst []uint8) ([]uint8, float64) {
	r := img.Bounds()
	scale := math.Min(1, math.Min(float64(size)/float64(r.Dx()), float64(size)/float64(r.Dy())))
	w := max(1, min(size, int(math.Round(float64(r.Dx())*scale))))
	h := max(1, min(size, int(math.Round(float64(r.Dy())*scale))))
	rgba := image.NewRGBA(image.Rect(0, 0, w, h))
	if scale == 1 {
		draw.Draw(rgba, rgba.Bounds(), img, r.Min, draw.Src)
	} else {
		draw.BiLinear.Scale(rgba, rgba.Bounds(), img, r, draw.Src, nil)
	}
	n := size * size * 3
	if cap(dst) < n {
		dst = make([]uint8, n)
	}
	dst = dst[:n]
	for i := 0; i < n; i += 3 {
		dst[i], dst[i+1], dst[i+2] = padRGB[0], padRGB[1], padRGB[2]
	}
	for y := 0; y < h; y++ {
		src := rgba.Pix[y*rgba.Stride:]
		row := dst[y*size*3:]
		for x := 0; x < w; x++ {
			row[3*x], row[3*x+1], row[3*x+2] = src[4*x], src[4*x+1], src[4*x+2]
		}
	}
	return dst, scale
}

// Det normalization by channel index of BGR data, as PaddleOCR applies it.
var (
	detMean = [3]float32{0.485, 0.456, 0.406}
	detStd  = [3]float32{0.229, 0.224, 0.225}
)

// DetInput writes the det model's input for an RGB canvas of size×size into dst
// (3·size·size floats, CHW): channels in BGR order, x/255 normalized by the
// ImageNet mean and standard deviation of each channel index.
func DetInput(canvas []uint8, size int, dst []float32) {
	plane := size * size
	var lut [3][256]float32
	for c := 0; c < 3; c++ {
		for v := 0; v < 256; v++ {
			lut[c][v] = (float32(v)/255 - detMean[c]) / detStd[c]
		}
	}
	for i := 0; i < plane; i++ {
		r, g, b := canvas[3*i], canvas[3*i+1], canvas[3*i+2]
		dst[i] = lut[0][b]
		dst[plane+i] = lut[1][g]
		dst[2*plane+i] = lut[2][r]
	}
}

// Box is a text region found in the det probability map: a rectangle of Width
// along the text direction and Height across it, centered at (CX, CY), its
// width axis at Angle radians from the x axis (clockwise on screen, y down),
// in canvas pixels. Score is the region's mean probability.
type Box struct {
	CX, CY, Width, Height, Angle, Score float64
}

// Corners returns the corners top-left, top-right, bottom-right, bottom-left
// (as read along the text), x then y.
func (b Box) Corners() [8]float64 {
	ux, uy := math.Cos(b.Angle), math.Sin(b.Angle)
	vx, vy := -uy, ux
	hw, hh := b.Width/2, b.Height/2
	return [8]float64{
		b.CX - ux*hw - vx*hh, b.CY - uy*hw - vy*hh,
		b.CX + ux*hw - vx*hh, b.CY + uy*hw - vy*hh,
		b.CX + ux*hw + vx*hh, b.CY + uy*hw + vy*hh,
		b.CX - ux*hw + vx*hh, b.CY - uy*hw + vy*hh,
	}
}

// Boxes finds the text regions of a w×h probability map (row major): pixels
// above o.Threshold, grouped into 8-connected components; each component with a
// mean probability ≥ o.BoxThreshold gets its minimum-area rectangle, grown by
// o.UnclipRatio, and is kept if both sides are ≥ o.MinSide. Boxes come in
// reading order (top to bottom, then left to right), at most o.MaxBoxes of them
// (the highest-scoring when there are more).
func (o OCR) Boxes(prob []float32, w, h int) []Box {
	labels := make([]bool, w*h) // visited
	var stack []int32
	var boxes []Box
	th := float32(o.Threshold)
	for start := range prob {
		if labels[start] || prob[start] <= th {
			continue
		}
		// Flood fill; per row keep the leftmost and rightmost pixel for the hull.
		rows := map[int][2]int{}
		var sum float64
		count := 0
		labels[start] = true
		stack = append(stack[:0], int32(start))
		for len(stack) > 0 {
			p := int(stack[len(stack)-1])
			stack = stack[:len(stack)-1]
			x, y := p%w, p/w
			sum += float64(prob[p])
			count++
			if r, ok := rows[y]; !ok {
				rows[y] = [2]int{x, x}
			} else {
				rows[y] = [2]int{min(r[0], x), max(r[1], x)}
			}
			for dy := -1; dy <= 1; dy++ {
				for dx := -1; dx <= 1; dx++ {
					nx, ny := x+dx, y+dy
					if nx < 0 || ny < 0 || nx >= w || ny >= h {
						continue
					}
					q := ny*w + nx
					if !labels[q] && prob[q] > th {
						labels[q] = true
						stack = append(stack, int32(q))
					}
				}
			}
		}
		score := sum / float64(count)
		if score < o.BoxThreshold || count < 4 {
			continue
		}
		pts := make([][2]float64, 0, 4*len(rows))
		for y, r := range rows {
			fy := float64(y)
			pts = append(pts, [2]float64{float64(r[0]), fy}, [2]float64{float64(r[1]) + 1, fy},
				[2]float64{float64(r[0]), fy + 1}, [2]float64{float64(r[1]) + 1, fy + 1})
		}
		b, ok := minAreaRect(convexHull(pts))
		if !ok || math.Min(b.Width, b.Height) < o.MinSide {
			continue
		}
		d := b.Width * b.Height * o.UnclipRatio / (2 * (b.Width + b.Height))
		b.Width += 2 * d
		b.Height += 2 * d
		b.Score = score
		boxes = append(boxes, b)
	}
	if len(boxes) > o.MaxBoxes {
		sort.Slice(boxes, func(i, j int) bool { return boxes[i].Score > boxes[j].Score })
		boxes = boxes[:o.MaxBoxes]
	}
	SortReading(boxes)
	return boxes
}

// SortReading sorts boxes top to bottom, and left to right among boxes whose
// centers are within half a box height of each other vertically.
func SortReading(boxes []Box) {
	sort.SliceStable(boxes, func(i, j int) bool {
		a, b := boxes[i], boxes[j]
		if math.Abs(a.CY-b.CY) < math.Min(a.Height, b.Height)/2 {
			return a.CX < b.CX
		}
		return a.CY < b.CY
	})
}

// convexHull returns the convex hull of pts counter-clockwise (Andrew's monotone chain).
func convexHull(pts [][2]float64) [][2]float64 {
	sort.Slice(pts, func(i, j int) bool {
		if pts[i][0] != pts[j][0] {
			return pts[i][0] < pts[j][0]
		}
		return pts[i][1] < pts[j][1]
	})
	cross := func(o, a, b [2]float64) float64 {
		return (a[0]-o[0])*(b[1]-o[1]) - (a[1]-o[1])*(b[0]-o[0])
	}
	hull := make([][2]float64, 0, 2*len(pts))
	for _, p := range pts {
		for len(hull) >= 2 && cross(hull[len(hull)-2], hull[len(hull)-1], p) <= 0 {
			hull = hull[:len(hull)-1]
		}
		hull = append(hull, p)
	}
	lower := len(hull) + 1
	for i := len(pts) - 2; i >= 0; i-- {
		p := pts[i]
		for len(hull) >= lower && cross(hull[len(hull)-2], hull[len(hull)-1], p) <= 0 {
			hull = hull[:len(hull)-1]
		}
		hull = append(hull, p)
	}
	return hull[:len(hull)-1]
}

// minAreaRect returns the minimum-area rectangle around a convex hull (rotating
// calipers: one side lies on a hull edge), with Width along the axis nearest
// the x axis, unless the other side is 1.5 times longer (vertical text: the long
// side is then the text direction, as PaddleOCR turns such crops).
func minAreaRect(hull [][2]float64) (Box, bool) {
	if len(hull) < 3 {
		return Box{}, false
	}
	best := math.Inf(1)
	var out Box
	for i := range hull {
		p, q := hull[i], hull[(i+1)%len(hull)]
		ex, ey := q[0]-p[0], q[1]-p[1]
		l := math.Hypot(ex, ey)
		if l == 0 {
			continue
		}
		ux, uy := ex/l, ey/l
		minU, maxU, minV, maxV := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
		for _, r := range hull {
			u := r[0]*ux + r[1]*uy
			v := -r[0]*uy + r[1]*ux
			minU, maxU = math.Min(minU, u), math.Max(maxU, u)
			minV, maxV = math.Min(minV, v), math.Max(maxV, v)
		}
		if a := (maxU - minU) * (maxV - minV); a < best {
			best = a
			cu, cv := (minU+maxU)/2, (minV+maxV)/2
			out = Box{
				CX: cu*ux - cv*uy, CY: cu*uy + cv*ux,
				Width: maxU - minU, Height: maxV - minV, Angle: math.Atan2(uy, ux),
			}
		}
	}
	if math.IsInf(best, 1) {
		return Box{}, false
	}
	// Turn the axes so that Angle is in (-45°, 45°]: width along the x axis.
	for out.Angle > math.Pi/4 {
		out.Angle -= math.Pi / 2
		out.Width, out.Height = out.Height, out.Width
	}
	for out.Angle <= -math.Pi/4 {
		out.Angle += math.Pi / 2
		out.Width, out.Height = out.Height, out.Width
	}
	if out.Height >= 1.5*out.Width { // vertical text: read along the long side
		out.Angle += math.Pi / 2
		out.Width, out.Height = out.Height, out.Width
	}
	return out, true
}

// Crop samples box from an RGB canvas of w×h pixels (bilinear) into dst, a
// [3, CropHeight, width] CHW tensor in BGR order normalized as (x/255−0.5)/0.5,
// the content taking the width its aspect ratio gives at height CropHeight (at
// most width, squashed beyond) and the rest padded with 0. It returns the
// content width.
func Crop(canvas []uint8, w, h int, box Box, width int, dst []float32) int {
	cw := width
	if box.Height > 0 {
		cw = min(width, max(1, int(math.Ceil(CropHeight*box.Width/box.Height))))
	}
	clear(dst[:3*CropHeight*width])
	plane := CropHeight * width
	ux, uy := math.Cos(box.Angle), math.Sin(box.Angle)
	vx, vy := -uy, ux
	for oy := 0; oy < CropHeight; oy++ {
		fv := ((float64(oy)+0.5)/CropHeight - 0.5) * box.Height
		for ox := 0; ox < cw; ox++ {
			fu := ((float64(ox)+0.5)/float64(cw) - 0.5) * box.Width
			sx := box.CX + ux*fu + vx*fv - 0.5
			sy := box.CY + uy*fu + vy*fv - 0.5
			r, g, b := bilinear(canvas, w, h, sx, sy)
			i := oy*width + ox
			dst[i] = b/127.5 - 1
			dst[plane+i] = g/127.5 - 1
			dst[2*plane+i] = r/127.5 - 1
		}
	}
	return cw
}

// bilinear samples the RGB canvas at (x, y) (pixel centers at integers), the
// coordinates clamped to the canvas.
func bilinear(c []uint8, w, h int, x, y float64) (r, g, b float32) {
	x = math.Max(0, math.Min(float64(w-1), x))
	y = math.Max(0, math.Min(float64(h-1), y))
	x0, y0 := int(x), int(y)
	x1, y1 := min(x0+1, w-1), min(y0+1, h-1)
	fx, fy := float32(x-float64(x0)), float32(y-float64(y0))
	at := func(px, py, ch int) float32 { return float32(c[(py*w+px)*3+ch]) }
	mix := func(ch int) float32 {
		top := at(x0, y0, ch)*(1-fx) + at(x1, y0, ch)*fx
		bot := at(x0, y1, ch)*(1-fx) + at(x1, y1, ch)*fx
		return top*(1-fy) + bot*fy
	}
	return mix(0), mix(1), mix(2)
}

// Rotate180 turns a [3, CropHeight, width] crop over in place: the content
// (its first contentWidth columns) is rotated by 180°; the padding stays at the right.
func Rotate180(crop []float32, width, contentWidth int) {
	contentWidth = max(0, min(contentWidth, width))
	plane := CropHeight * width
	for c := 0; c < 3; c++ {
		p := crop[c*plane : (c+1)*plane]
		for y := 0; y < CropHeight/2+CropHeight%2; y++ {
			y2 := CropHeight - 1 - y
			for x := 0; x < contentWidth; x++ {
				x2 := contentWidth - 1 - x
				i, j := y*width+x, y2*width+x2
				if i >= j {
					continue
				}
				p[i], p[j] = p[j], p[i]
			}
		}
	}
}

// LoadDictionary reads the rec model's character dictionary (one character a
// line; the last line may lack its newline) and returns the labels of the
// model's classes: blank, the lines, then a space.
func LoadDictionary(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dictionary: %w (run `make models` to fetch it)", err)
	}
	defer f.Close()
	labels := []string{""}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if !utf8.ValidString(line) {
			return nil, fmt.Errorf("dictionary %s: line %d is not UTF-8", path, len(labels))
		}
		labels = append(labels, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("dictionary %s: %w", path, err)
	}
	if len(labels) == 1 {
		return nil, fmt.Errorf("dictionary %s is empty", path)
	}
	return append(labels, " "), nil
}

// CTCDecode reads one row of the rec model's output, T steps of C class
// probabilities (class 0 the CTC blank): the most probable class of each step,
// repeats collapsed and blanks dropped, mapped through labels (len C). It
// returns the text, without leading or trailing spaces, and its score (the mean
// probability of the kept classes; 0 for no text).
func CTCDecode(probs []float32, T, C int, labels []string, sb *strings.Builder) (string, float32) {
	sb.Reset()
	prev := -1
	var sum float32
	kept := 0
	for t := 0; t < T; t++ {
		row := probs[t*C : (t+1)*C]
		best, bp := 0, row[0]
		for c := 1; c < C; c++ {
			if row[c] > bp {
				best, bp = c, row[c]
			}
		}
		if best != 0 && best != prev && best < len(labels) {
			sb.WriteString(labels[best])
			sum += bp
			kept++
		}
		prev = best
	}
	if kept == 0 {
		return "", 0
	}
	return strings.TrimSpace(sb.String()), sum / float32(kept)
}
