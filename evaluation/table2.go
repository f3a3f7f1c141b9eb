package evaluation

import (
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/configs"
	"github.com/piccolo-serving/piccolo/planner"
)

// TableIIRow is one latency split of the paper's Table II (M2 then M3 of Table
// I at 50 and 40 req/s, SLO 0.9 s): the published budgets, batches and cost,
// and ours under each latency model (Algorithm 1 at those budgets, no headroom).
type TableIIRow struct {
	ID                   int
	BudgetM2, BudgetM3   float64 // seconds
	PaperB2, PaperB3     int
	PaperCost            float64
	Model                []string // latency models, in Batch/Cost order
	Batch2, Batch3, Cost []float64
}

// TableII recomputes Table II from configs/paper/profiles.yaml under the
// round-robin 2d model, Theorem 1 (Algorithm 1 as published) and piccolo's
// grouped exact model.
func TableII() ([]TableIIRow, error) {
	data, err := fs.ReadFile(configs.FS, "paper/profiles.yaml")
	if err != nil {
		return nil, err
	}
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "configs/paper/profiles.yaml", Data: data})
	if err != nil {
		return nil, err
	}
	c2, err := planner.Candidates(cfg, "m2")
	if err != nil {
		return nil, err
	}
	c3, err := planner.Candidates(cfg, "m3")
	if err != nil {
		return nil, err
	}
	rows := []TableIIRow{
		{ID: 1, BudgetM2: 0.25, BudgetM3: 0.65, PaperB2: 2, PaperB3: 8, PaperCost: 4.73},
		{ID: 2, BudgetM2: 0.40, BudgetM3: 0.50, PaperB2: 4, PaperB3: 4, PaperCost: 4.00},
		{ID: 3, BudgetM2: 0.55, BudgetM3: 0.35, PaperB2: 8, PaperB3: 2, PaperCost: 4.67},
	}
	models := []struct {
		name string
		p    planner.ConfigParams
	}{
		{"rr-2d", planner.ConfigParams{Model: planner.RoundRobin, MaxConfigs: 1}},
		{"tc-theorem1 (paper)", planner.ConfigParams{Model: planner.TheoremOne}},
		{"tc-exact (piccolo)", planner.ConfigParams{Model: planner.TCExact, Grouped: true}},
	}
	for i := range rows {
		r := &rows[i]
		for _, m := range models {
			s2, err2 := planner.GenerateConfigs(c2, 50, r.BudgetM2, m.p)
			s3, err3 := planner.GenerateConfigs(c3, 40, r.BudgetM3, m.p)
			r.Model = append(r.Model, m.name)
			if err2 != nil || err3 != nil {
				r.Batch2, r.Batch3, r.Cost = append(r.Batch2, 0), append(r.Batch3, 0), append(r.Cost, 0)
				continue
			}
			r.Batch2 = append(r.Batch2, float64(s2.Groups[0].Config.Batch))
			r.Batch3 = append(r.Batch3, float64(s3.Groups[0].Config.Batch))
			r.Cost = append(r.Cost, s2.Cost+s3.Cost)
		}
	}
	return rows, nil
}

// WriteTableII writes rows as a Markdown table.
func WriteTableII(w io.Writer, rows []TableIIRow) {
	if len(rows) == 0 {
		return
	}
	var head strings.Builder
	head.WriteString("| ID | M2 budget (b) | M3 budget (b) | paper's cost |")
	for _, m := range rows[0].Model {
		fmt.Fprintf(&head, " %s: b, cost |", m)
	}
	fmt.Fprintln(w, head.String())
	fmt.Fprintln(w, "|---|---|---|---|"+strings.Repeat("---|", len(rows[0].Model)))
	for _, r := range rows {
		fmt.Fprintf(w, "| %d | %.2f (%d) | %.2f (%d) | %.2f |", r.ID, r.BudgetM2, r.PaperB2, r.BudgetM3, r.PaperB3, r.PaperCost)
		for i := range r.Model {
			if r.Cost[i] == 0 {
				fmt.Fprint(w, " infeasible |")
				continue
			}
			fmt.Fprintf(w, " %.0f+%.0f, %.2f |", r.Batch2[i], r.Batch3[i], r.Cost[i])
		}
		fmt.Fprintln(w)
	}
}
