package api

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteTable prints p for people (`piccolo plan`'s table): a header with the
// cost and the devices it needs once placed (devices; negative: "?"), then one
// block per session (with its own max utilization where it has one), a row
// per config group (its race, and the duration its WCL was computed with
// where that is its measured tail's, ModulePlan.Race and GroupPlan.TailMs).
func (p *Plan) WriteTable(w io.Writer, devices int) {
	devs := "?"
	if devices >= 0 {
		devs = strconv.Itoa(devices)
	}
	fmt.Fprintf(w, "policy %s, latency model %s, max utilization %.2f: total cost %.4g on %s devices once placed (planned in %.3gms)\n",
		p.Policy, p.LatencyModel, p.MaxUtilization, p.TotalCost, devs, p.RuntimeMs)
	for _, s := range p.Sessions {
		fmt.Fprintln(w)
		if s.Error != "" {
			fmt.Fprintf(w, "session %s: SLO %gms: NOT PLANNED: %s\n", s.Name, s.SLOMs, s.Error)
			continue
		}
		variants := s.AccuracyTarget > 0 // the session chose variants: show them
		accuracy := ""
		if variants {
			how := ""
			if s.AccuracyJoint {
				how = " measured jointly"
			}
			accuracy = fmt.Sprintf(", accuracy %.4g%s (target %.4g)", s.Accuracy, how, s.AccuracyTarget)
		}
		if s.MaxUtilization > 0 { // its own headroom (the burst check's, per session)
			accuracy += fmt.Sprintf(", max utilization %.2f", s.MaxUtilization)
		}
		fmt.Fprintf(w, "session %s: SLO %gms, latency %.1fms, cost %.4g%s\n", s.Name, s.SLOMs, s.LatencyMs, s.Cost, accuracy)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		head, blank := "", ""
		if variants {
			head, blank = "\tVARIANT\tACCURACY", "\t\t"
		}
		fmt.Fprintln(tw, "  MODULE"+head+"\tRATE\tDUMMY\tBUDGET\tWCL\tCOST\tGROUP\tMACHINES\tGROUP RATE\tGROUP WCL")
		for _, m := range s.Modules {
			name := m.Name
			if variants {
				v, a := "-", "-"
				if m.Variant != "" {
					v, a = m.Variant, fmt.Sprintf("%.4g", m.Accuracy)
				}
				name += "\t" + v + "\t" + a
			}
			for k, g := range m.Configs {
				group := fmt.Sprintf("%s b%d c%d %.4gms", g.Hardware, g.Batch, g.Concurrency, g.DurationMs)
				if m.Race > 1 { // every batch on Race machines at once
					group += fmt.Sprintf(" race %d", m.Race)
				}
				if g.TailMs > 0 { // its WCL counts its measured tail's slow batches
					group += fmt.Sprintf(" tail %.4gms", g.TailMs)
				}
				if k == 0 {
					fmt.Fprintf(tw, "  %s\t%.4g\t%.4g\t%.1fms\t%.1fms\t%.4g\t%s\t%.4g\t%.4g\t%.1fms\n",
						name, m.Rate, m.DummyRate, m.BudgetMs, m.WCLMs, m.Cost, group, g.Machines, g.Rate, g.WCLMs)
				} else {
					fmt.Fprintf(tw, "  %s\t\t\t\t\t\t%s\t%.4g\t%.4g\t%.1fms\n", blank, group, g.Machines, g.Rate, g.WCLMs)
				}
			}
			if len(m.Configs) == 0 {
				fmt.Fprintf(tw, "  %s\t%.4g\t%.4g\t%.1fms\t%.1fms\t%.4g\t(idle)\t\t\t\n", name, m.Rate, m.DummyRate, m.BudgetMs, m.WCLMs, m.Cost)
			}
		}
		tw.Flush()
	}
}
