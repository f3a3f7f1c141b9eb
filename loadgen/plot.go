package loadgen

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// maxPlotPoints bounds the points of the CDF line; larger runs are sampled evenly.
const maxPlotPoints = 2000

// WritePlot writes the empirical CDF of latencies (ascending, as in
// Report.Latencies) to path, a .png, .svg or .pdf file, with a vertical line at
// slo when slo > 0. title heads the plot.
func WritePlot(path, title string, latencies []time.Duration, slo time.Duration) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".png" && ext != ".svg" && ext != ".pdf" {
		return fmt.Errorf("plot %q: unknown format %q; allowed: .png, .svg, .pdf", path, ext)
	}
	if len(latencies) == 0 {
		return fmt.Errorf("plot %q: no successful request to plot", path)
	}
	n := len(latencies)
	step := max(1, n/maxPlotPoints)
	xys := make(plotter.XYs, 0, n/step+2)
	for i := 0; i < n; i += step {
		xys = append(xys, plotter.XY{X: ms(latencies[i]), Y: float64(i+1) / float64(n)})
	}
	if last := xys[len(xys)-1]; last.Y < 1 {
		xys = append(xys, plotter.XY{X: ms(latencies[n-1]), Y: 1})
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "latency (ms)"
	p.Y.Label.Text = "fraction of successful requests"
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	line, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("plot %q: %w", path, err)
	}
	line.Color = color.RGBA{B: 200, A: 255}
	p.Add(line)
	p.Legend.Add("CDF", line)
	if slo > 0 {
		s, err := plotter.NewLine(plotter.XYs{{X: ms(slo), Y: 0}, {X: ms(slo), Y: 1}})
		if err != nil {
			return fmt.Errorf("plot %q: %w", path, err)
		}
		s.Color = color.RGBA{R: 200, A: 255}
		s.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(s)
		p.Legend.Add(fmt.Sprintf("SLO %.4g ms", ms(slo)), s)
		p.X.Max = max(p.X.Max, ms(slo)*1.05)
	}
	p.Legend.Top = false
	p.Legend.Left = false
	if err := p.Save(6*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %q: %w", path, err)
	}
	return nil
}
