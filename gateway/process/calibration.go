package process

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/metrics"
	"github.com/piccolo-serving/piccolo/scheduler/cluster"
)

// calibrationSaveEvery is how often the gateway stores its calibration (and
// once more on shutdown): a crash loses at most this much learning.
const calibrationSaveEvery = 10 * time.Second

// newCalibration returns the gateway's calibration (nil with
// --calibration=false) with its metrics registered on reg, loaded from
// --calibration-file when it exists, else with --consul from every gateway's
// calibration in the cluster's KV (its own first). A malformed file is an
// error; a malformed KV value is logged and skipped (another gateway's).
func newCalibration(ctx context.Context, o Options, log *zap.Logger, reg prometheus.Registerer) (*calibrate.Estimator, error) {
	if !o.Calibrate {
		log.Info("calibration off: plans and admission use the offline profiles only")
		return nil, nil
	}
	est, err := calibrate.New(calibrate.Options{})
	if err != nil {
		return nil, err
	}
	reg.MustRegister(metrics.CalibrationCollector(func() []metrics.CalibrationSeries {
		var out []metrics.CalibrationSeries
		for _, m := range est.Snapshot() {
			out = append(out, metrics.CalibrationSeries{Model: m.Model, Hardware: m.Hardware, Device: m.Device, Batch: m.Batch,
				Concurrency: m.Concurrency, Profiled: m.Profiled, Measured: m.Estimate, Samples: m.Samples})
		}
		return out
	}))
	switch {
	case o.CalFile != "":
		found, err := est.Load(o.CalFile)
		if err != nil {
			return nil, err
		}
		log.Info("calibration file", zap.String("file", o.CalFile), zap.Bool("found", found), zap.Int("series", len(est.Snapshot())))
	case o.Consul != "":
		kv, err := cluster.New(o.Consul, cluster.Options{Prefix: o.ClusterPrefix})
		if err != nil {
			return nil, err
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		all, err := kv.Calibrations(lctx, o.GatewayID)
		if err != nil {
			log.Warn("calibration not read from Consul; starting from the offline profiles", zap.Error(err))
		}
		for _, data := range all {
			if err := est.Unmarshal(data); err != nil {
				log.Warn("a gateway's calibration in Consul skipped", zap.Error(err))
			}
		}
		log.Info("calibration from Consul KV", zap.Int("gateways", len(all)), zap.Int("series", len(est.Snapshot())))
	}
	return est, nil
}

// keepCalibration stores est every calibrationSaveEvery until ctx ends or
// the returned stop is called, and once more then: to --calibration-file, or
// with --consul (no file) under the cluster's KV key of gatewayID (this
// gateway's id in Consul), every cluster.CalibrationEvery (the elected
// scheduler follows it). Nothing
// (a no-op stop) when est is nil or neither is set.
func keepCalibration(ctx context.Context, est *calibrate.Estimator, o Options, gatewayID string, log *zap.Logger) (stop func()) {
	var save func() error
	every := calibrationSaveEvery
	switch {
	case est == nil:
		return func() {}
	case o.CalFile != "":
		save = func() error { return est.Save(o.CalFile, time.Now()) }
	case o.Consul != "":
		kv, err := cluster.New(o.Consul, cluster.Options{Prefix: o.ClusterPrefix})
		if err != nil {
			log.Warn("calibration will not be kept in Consul", zap.Error(err))
			return func() {}
		}
		every = cluster.CalibrationEvery
		save = func() error {
			data, err := est.Marshal(time.Now())
			if err != nil {
				return err
			}
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return kv.PutCalibration(sctx, gatewayID, data)
		}
	default:
		return func() {}
	}
	saveLogged := func() {
		if err := save(); err != nil {
			log.Warn("calibration not saved", zap.Error(err))
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				saveLogged()
			}
		}
	}()
	return func() { cancel(); <-done; saveLogged() }
}

// colocationSeries is est's co-location slowdowns for the plan served now
// (plan), as metrics.ColocationCollector reads them.
func colocationSeries(est *calibrate.Estimator, plan func() *api.Plan) func() []metrics.CalibrationSeries {
	return func() []metrics.CalibrationSeries {
		var out []metrics.CalibrationSeries
		for _, c := range est.Colocations(plan()) {
			out = append(out, metrics.CalibrationSeries{Model: c.Model, Hardware: c.Hardware, Device: c.Device, Batch: c.Batch,
				Concurrency: c.Concurrency, Measured: c.Shared, Slowdown: c.Slowdown, With: c.With})
		}
		return out
	}
}
