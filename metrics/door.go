package metrics

import "github.com/prometheus/client_golang/prometheus"

// DoorStats is what DoorCollector reads at each scrape: kserve's
// OverloadStats in this package's terms (metrics does not import kserve).
type DoorStats struct {
	Limit, InFlight int64
	Shed            uint64
	// ShedBySession are those of Shed the door could name a session for,
	// ShedUnnamed the others (served with session="").
	ShedBySession map[string]uint64
	ShedUnnamed   uint64
	DelaySeconds  float64
	// Held are the repeated refusals held before their 429
	// (kserve.OverloadOptions.Hold).
	Held uint64
	// Floor is the lowest a cut may take Limit now: the requests the
	// gateway carried in flight calmly over the last second or two.
	Floor int64
}

var (
	descDoorShed     = prometheus.NewDesc(GatewayDoorShedTotal, "Infer requests the gateway's door refused before decoding them (HTTP 429, gRPC RESOURCE_EXHAUSTED): its own CPU saturated. By session where the HTTP path named one already served; session=\"\" the rest (gRPC, a session's first requests).", []string{"session"}, nil)
	descDoorLimit    = prometheus.NewDesc(GatewayDoorLimit, "The door's limit on infer requests in flight (adaptive, docs/traffic.md \"Overload control\").", nil, nil)
	descDoorInFlight = prometheus.NewDesc(GatewayDoorInFlight, "Infer requests in flight past the door.", nil, nil)
	descDoorHeld     = prometheus.NewDesc(GatewayDoorHeldTotal, "Refusals of infer requests (HTTP 429; gRPC RESOURCE_EXHAUSTED after decoding) held before they were answered: their connection had been refused less than the Retry-After ago (--overload-hold).", nil, nil)
	descDoorFloor    = prometheus.NewDesc(GatewayDoorFloor, "The lowest the door's limit may be cut to now: the infer requests in flight at its calm intervals (delay under the target, nothing refused) over the last 1–2 s, plus their square root (docs/traffic.md, \"The calm floor\").", nil, nil)
	descDoorDelay    = prometheus.NewDesc(GatewayDoorDelaySeconds, "The gateway's scheduling delay the door last measured: p90 of the time its goroutines waited for a CPU over one interval, in seconds.", nil, nil)
)

// DoorCollector serves the door's metrics (piccolo_gateway_door_*) from
// stats, called at each scrape.
func DoorCollector(stats func() DoorStats) prometheus.Collector { return doorCollector{stats} }

type doorCollector struct{ stats func() DoorStats }

func (c doorCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDoorShed
	ch <- descDoorLimit
	ch <- descDoorInFlight
	ch <- descDoorDelay
	ch <- descDoorHeld
	ch <- descDoorFloor
}

func (c doorCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for name, n := range s.ShedBySession {
		ch <- prometheus.MustNewConstMetric(descDoorShed, prometheus.CounterValue, float64(n), name)
	}
	ch <- prometheus.MustNewConstMetric(descDoorShed, prometheus.CounterValue, float64(s.ShedUnnamed), "")
	ch <- prometheus.MustNewConstMetric(descDoorLimit, prometheus.GaugeValue, float64(s.Limit))
	ch <- prometheus.MustNewConstMetric(descDoorInFlight, prometheus.GaugeValue, float64(s.InFlight))
	ch <- prometheus.MustNewConstMetric(descDoorDelay, prometheus.GaugeValue, s.DelaySeconds)
	ch <- prometheus.MustNewConstMetric(descDoorHeld, prometheus.CounterValue, float64(s.Held))
	ch <- prometheus.MustNewConstMetric(descDoorFloor, prometheus.GaugeValue, float64(s.Floor))
}
