package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/waitroom/waitroom/loadtest/sale"
)

// Series is one line of a chart panel.
type Series struct {
	Name  string
	Color color.Color
	Value func(sale.Sample) float64
}

var (
	blue   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	orange = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	green  = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	red    = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	grey   = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
)

// SaleChart draws the sale over time as two panels sharing the time axis:
// people (queue length, admitted) above, seats (holds, sold, remaining)
// below, since the two differ by orders of magnitude. The format follows
// the file's extension: .svg or .png.
func SaleChart(path string, r *sale.Result) error {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".svg" && ext != ".png" {
		return fmt.Errorf("chart %s: want a .svg or .png file", path)
	}
	title := fmt.Sprintf("Flash sale: %s users, %s seats (event %d)", Count(r.Users), Count(r.Event.Capacity), r.Event.ID)
	people := panel(r.Timeline, title, "people", []Series{
		{"waiting in the queue", blue, func(s sale.Sample) float64 { return float64(s.Queue) }},
		{"admitted (watermark)", orange, func(s sale.Sample) float64 { return float64(s.Admitted) }},
	})
	seats := panel(r.Timeline, "", "seats", []Series{
		{"held, not yet paid", red, func(s sale.Sample) float64 { return float64(s.Holds) }},
		{"sold (confirmed)", green, func(s sale.Sample) float64 { return float64(s.Sold) }},
		{"remaining", grey, func(s sale.Sample) float64 { return float64(s.Remaining) }},
	})
	seats.X.Label.Text = "seconds since the first arrival"

	const w, h = 10 * vg.Inch, 7 * vg.Inch
	var canvas vg.CanvasWriterTo
	if ext == ".svg" {
		canvas = vgsvg.New(w, h)
	} else {
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))}
	}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
	plots := [][]*plot.Plot{{people}, {seats}}
	dc := draw.New(canvas)
	for j, row := range plot.Align(plots, tiles, dc) {
		plots[j][0].Draw(row[0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if _, err := canvas.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("chart: %w", err)
	}
	return f.Close()
}

func panel(timeline []sale.Sample, title, ylabel string, series []Series) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	p.X.Tick.Marker = secondsTicks{}
	p.Y.Tick.Marker = countTicks{}
	top := 1.0
	for _, s := range series {
		pts := make(plotter.XYs, len(timeline))
		for i, smp := range timeline {
			pts[i].X = smp.T.Seconds()
			pts[i].Y = s.Value(smp)
			top = max(top, pts[i].Y)
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			continue
		}
		line.Color = s.Color
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(s.Name, line)
	}
	// Headroom above the data for the legend.
	p.Y.Max = top * 1.3
	return p
}

// secondsTicks marks whole seconds at a step that gives about eight marks.
type secondsTicks struct{}

func (secondsTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 15, 20, 30, 60, 120, 300} {
		step = s
		if (hi-lo)/s <= 8 {
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ticks
}

// countTicks are the default marks labelled as whole counts ("12,000").
type countTicks struct{}

func (countTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" && t.Value == math.Trunc(t.Value) {
			ticks[i].Label = Count(int64(t.Value))
		}
	}
	return ticks
}
