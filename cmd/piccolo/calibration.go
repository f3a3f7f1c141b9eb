package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/calibrate"
	"github.com/piccolo-serving/piccolo/metrics"
)

// calibrationSaveEvery is how often the gateway writes --calibration-file
// (and once more on shutdown): a crash loses at most this much learning.
const calibrationSaveEvery = 10 * time.Second

// startCalibration returns the gateway's calibration (nil with
// --calibration=false), loaded from file when it exists, its metrics
// registered on reg, and saved to file every calibrationSaveEvery until ctx
// ends or stop is called; stop saves it a last time.
func startCalibration(ctx context.Context, on bool, file string, log *zap.Logger, reg prometheus.Registerer) (*calibrate.Estimator, func(), error) {
	if !on {
		log.Info("calibration off: plans and admission use the offline profiles only")
		return nil, func() {}, nil
	}
	est, err := calibrate.New(calibrate.Options{})
	if err != nil {
		return nil, nil, err
	}
	reg.MustRegister(metrics.CalibrationCollector(est))
	if file == "" {
		return est, func() {}, nil
	}
	found, err := est.Load(file)
	if err != nil {
		return nil, nil, err
	}
	log.Info("calibration file", zap.String("file", file), zap.Bool("found", found), zap.Int("series", len(est.Snapshot())))
	save := func() {
		if err := est.Save(file, time.Now()); err != nil {
			log.Warn("calibration not saved", zap.Error(err))
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(calibrationSaveEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				save()
			}
		}
	}()
	return est, func() { cancel(); <-done; save() }, nil
}
