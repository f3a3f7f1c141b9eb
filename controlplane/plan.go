package controlplane

import (
	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/scheduler"
	"github.com/piccolo-serving/piccolo/scheduler/control"
	"github.com/piccolo-serving/piccolo/simulate"
)

// DefaultBurstTarget is the share of simulated Poisson requests that must meet
// the SLO when the utilisation is not given (--burst-target).
const DefaultBurstTarget = 0.999

// PlanForServing plans for serving: with a utilisation given, as asked; without,
// the cheapest plan whose simulation under Poisson arrivals meets the SLO for
// burstTarget of requests (simulate.PlanForBursts), so the headroom follows the
// plan's slack instead of a fixed guess. When the config lists backends, only
// their hardware types are planned for: a catalog may name types the cluster
// does not have (with Consul, the leader does the same with its members).
// burstTarget 0 means DefaultBurstTarget. `piccolo gateway`, `piccolo scheduler`
// and the demo plan with it.
func PlanForServing(cfg *api.Config, opts scheduler.Options, burstTarget float64) (*api.Plan, error) {
	present := map[string]bool{}
	for _, b := range cfg.Backends {
		present[b.Hardware] = true
	}
	cfg = control.OnlyPresent(cfg, present)
	if opts.MaxUtilization != 0 {
		return scheduler.Plan(cfg, opts)
	}
	if burstTarget == 0 {
		burstTarget = DefaultBurstTarget
	}
	plan, _, err := simulate.PlanForBursts(cfg, opts, burstTarget, 1)
	return plan, err
}
