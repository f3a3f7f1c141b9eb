package status

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/piccolo-serving/piccolo/metrics"
)

// writeHealth prints the gateway's view of its backends' health (up, down,
// stragglers with their measured/profiled ratio and ejections) and the
// retries and hedges over the window; nothing when the gateway serves none of
// these metrics.
func writeHealth(w io.Writer, from, now *snapshot) {
	ups := now.series(metrics.GatewayBackendUp)
	if len(ups) == 0 {
		return
	}
	slow := map[string]float64{}
	for _, sr := range now.series(metrics.GatewayBackendSlowness) {
		slow[sr.labels["backend"]] = sr.value
	}
	ej := map[string]float64{}
	for _, sr := range now.series(metrics.GatewayBackendEjectionsTotal) {
		ej[sr.labels["backend"]] = sr.value
	}
	var parts []string
	for _, sr := range ups {
		id := sr.labels["backend"]
		p := id + " up"
		if sr.value == 0 {
			p = id + " DOWN"
		}
		if s := slow[id]; s >= 1.5 {
			p += fmt.Sprintf(" SLOW ×%.1f", s)
		}
		if n := ej[id]; n > 0 {
			p += fmt.Sprintf(" (ejected %.0f×)", n)
		}
		parts = append(parts, p)
	}
	sort.Strings(parts)
	fmt.Fprintf(w, "backend health: %s\n", strings.Join(parts, ", "))
	batches := delta(from, now, metrics.GatewayBatchesSentTotal, nil)
	retries := delta(from, now, metrics.GatewayRetriesTotal, nil)
	won := delta(from, now, metrics.GatewayHedgesTotal, map[string]string{"outcome": "won"})
	hedges := delta(from, now, metrics.GatewayHedgesTotal, nil)
	rate := "-"
	if batches > 0 {
		rate = fmt.Sprintf("%.2f%%", 100*hedges/batches)
	}
	fmt.Fprintf(w, "faults: %.0f batches, %.0f retried, %.0f hedged (%s, won %.0f), hedge machine time %s\n\n",
		batches, retries, hedges, rate, won, fmtDur(delta(from, now, metrics.GatewayHedgeSecondsTotal, nil)))
}
