package calibrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// fileVersion is the version of the calibration file's format.
const fileVersion = 1

// file is what Marshal writes: every series' window, so a restart resumes
// with the same estimates (no summary loses the quantile).
type file struct {
	Version int          `json:"version"`
	Saved   time.Time    `json:"saved"`
	Series  []fileSeries `json:"series"`
}

type fileSeries struct {
	SeriesKey
	Total uint64 `json:"total"`
	// Last is when the series' latest batch was observed (absent: only
	// loaded, never observed since). Unmarshal does not use it (a loaded
	// series counts for Drift only once measured again); Merge does.
	Last time.Time `json:"last,omitzero"`
	// Micros are the window's durations in µs, oldest first.
	Micros []int64 `json:"durations_us"`
}

// Marshal returns every series as JSON (the --calibration-file's content
// and the cluster's Consul KV value).
func (e *Estimator) Marshal(now time.Time) ([]byte, error) {
	f := file{Version: fileVersion, Saved: now.UTC()}
	e.mu.Lock()
	for k, s := range e.series {
		fs := fileSeries{SeriesKey: k, Total: s.total, Last: s.last, Micros: make([]int64, 0, len(s.d))}
		for i := range s.d { // oldest first: from next on a full ring
			fs.Micros = append(fs.Micros, s.d[(s.next+i)%len(s.d)].Microseconds())
		}
		f.Series = append(f.Series, fs)
	}
	e.mu.Unlock()
	return json.MarshalIndent(f, "", " ")
}

// Unmarshal adds the series in data (Marshal's output) to e: a series e
// already has keeps its own samples (they are newer). Loaded series count
// for Calibrate but not for Drift until a batch is observed on them. The
// error names what in data is malformed; nothing is added then.
func (e *Estimator) Unmarshal(data []byte) error {
	loaded, err := e.decode(data)
	if err != nil {
		return err
	}
	for _, s := range loaded {
		s.last = time.Time{}
	}
	e.mu.Lock()
	for k, s := range loaded {
		if _, ok := e.series[k]; !ok {
			e.series[k] = s
		}
	}
	e.mu.Unlock()
	return nil
}

// decode returns the series in data (Marshal's output) as e's windows, with
// their Last; the error names what is malformed.
func (e *Estimator) decode(data []byte) (map[SeriesKey]*series, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	if f.Version != fileVersion {
		return nil, fmt.Errorf("calibrate: format version %d; this build reads version %d", f.Version, fileVersion)
	}
	loaded := map[SeriesKey]*series{}
	for i, fs := range f.Series {
		if fs.Model == "" || fs.Hardware == "" || fs.Batch < 1 || fs.Concurrency < 1 {
			return nil, fmt.Errorf("calibrate: series %d (%s): want a model, a hardware type, batch ≥ 1 and concurrency ≥ 1", i, fs.SeriesKey)
		}
		s := newSeries(e.o.Window)
		s.last = fs.Last
		// The file keeps no sample's own time: each counts as of the
		// series' latest batch (a merged series' window is as fresh as it).
		var stamp int64
		if !fs.Last.IsZero() {
			stamp = fs.Last.UnixNano()
		}
		for _, us := range fs.Micros {
			if us <= 0 {
				return nil, fmt.Errorf("calibrate: series %d (%s): duration %dµs: want > 0", i, fs.SeriesKey, us)
			}
			s.add(time.Duration(us)*time.Microsecond, stamp, e.o.Window)
		}
		s.total = max(fs.Total, uint64(len(fs.Micros)))
		loaded[fs.SeriesKey] = s
	}
	return loaded, nil
}

// Merge returns a new Estimator with options o holding, for every series
// key (a model's entry on one device), the series of calibrations (Marshal's
// output, one per gateway) whose latest batch is the newest, ties going to
// the one with more batches, then to the earlier calibration: each device's
// freshest measurement, whichever gateway sent its batches. Merged series
// keep their latest batch's time (the measuring gateway's clock), so Drift
// counts those measured within Options.Recent as it counts its own. It is
// the cluster's elected re-planner's view of every gateway's calibration
// (docs/calibration.md, "Cluster"). A malformed calibration is skipped and
// named in the error (index in calibrations), which comes with the merge of
// the others; the error of o out of range comes with no Estimator.
func Merge(o Options, calibrations ...[]byte) (*Estimator, error) {
	e, err := New(o)
	if err != nil {
		return nil, err
	}
	var errs []error
	for i, data := range calibrations {
		loaded, err := e.decode(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("calibration %d: %w", i, err))
			continue
		}
		for k, s := range loaded {
			if have, ok := e.series[k]; !ok || s.last.After(have.last) || (s.last.Equal(have.last) && s.total > have.total) {
				e.series[k] = s
			}
		}
	}
	return e, errors.Join(errs...)
}

// Save writes Marshal's output to path atomically (a temporary file in the
// same directory, renamed).
func (e *Estimator) Save(path string, now time.Time) error {
	data, err := e.Marshal(now)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("calibrate: save: %w", err)
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("calibrate: save %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("calibrate: save: %w", err)
	}
	return nil
}

// Load reads path (Save's output) into e; a missing file is no error (the
// first start), found reports whether there was one.
func (e *Estimator) Load(path string) (found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("calibrate: load: %w", err)
	}
	if err := e.Unmarshal(data); err != nil {
		return true, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}
