package controlplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/api"
)

// WatchOptions configure a ConfigWatcher.
type WatchOptions struct {
	// Debounce is how long the files must stay quiet after an event before they
	// are reloaded: editors write a file several times per save (default 250ms).
	Debounce time.Duration
	// Logger gets a line per reload: info when applied, warn with the loader's
	// errors when refused. Nil logs nothing.
	Logger *zap.Logger
	// OnReload, when set, is called after each reload attempt from the
	// watcher's goroutine: with the new snapshot, or with the error that left
	// the running config as it was. Reloads whose files did not change (a save
	// without edits) are skipped and not reported.
	OnReload func(ConfigSnapshot, error)
}

// ConfigWatcher reloads the config files when they change and applies the result
// through ConfigStore.Update with cause "config". It watches the files'
// directories, not the files, so an editor's rename-replace save (write a temp
// file, rename it over the original) is seen as well as an in-place write. An
// invalid edit is logged with the loader's errors and the running config stays
// as it was; the next valid edit applies.
//
// Changes made through the admin API live in memory only: a later edit of the
// files replaces the whole config with the files' content.
type ConfigWatcher struct {
	store  *ConfigStore
	files  []string // absolute, cleaned, in the order given
	opts   WatchOptions
	w      *fsnotify.Watcher
	last   [32]byte // hash of the files' bytes last applied (or initially read)
	cancel context.CancelFunc
	done   chan struct{}
	// refused counts reloads refused for overwriting a newer admin change
	// (ConfigStore.fileGuard); Refusals exports it.
	refused prometheus.Counter
	once    sync.Once
}

// StartConfigWatcher starts watching files (the paths `-c` named) on a goroutine
// of its own until ctx ends or Close is called. It fails when a file's directory
// cannot be watched.
func StartConfigWatcher(ctx context.Context, store *ConfigStore, files []string, opts WatchOptions) (*ConfigWatcher, error) {
	if store == nil || len(files) == 0 {
		return nil, errors.New("controlplane: StartConfigWatcher needs a ConfigStore and at least one file")
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 250 * time.Millisecond
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch config files: %w", err)
	}
	cw := &ConfigWatcher{store: store, opts: opts, w: w, done: make(chan struct{}), refused: newFileRefusals()}
	dirs := map[string]bool{}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("watch config file %s: %w", f, err)
		}
		cw.files = append(cw.files, abs)
		if d := filepath.Dir(abs); !dirs[d] {
			dirs[d] = true
			if err := w.Add(d); err != nil {
				w.Close()
				return nil, fmt.Errorf("watch config file %s: directory %s: %w", f, d, err)
			}
		}
	}
	if _, h, err := cw.read(); err == nil {
		cw.last = h
	}
	ctx, cw.cancel = context.WithCancel(ctx)
	go cw.run(ctx)
	return cw, nil
}

// Refusals is the counter piccolo_config_file_overwrites_refused_total: reloads
// refused because the files would overwrite a newer admin API change.
func (cw *ConfigWatcher) Refusals() prometheus.Counter { return cw.refused }

// Close stops watching and waits for the watcher's goroutine (and a reload in
// progress) to end.
func (cw *ConfigWatcher) Close() error {
	cw.once.Do(cw.cancel)
	<-cw.done
	return nil
}

func (cw *ConfigWatcher) watched(name string) bool {
	name = filepath.Clean(name)
	for _, f := range cw.files {
		if f == name {
			return true
		}
	}
	return false
}

func (cw *ConfigWatcher) run(ctx context.Context) {
	defer close(cw.done)
	defer cw.w.Close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case ev, ok := <-cw.w.Events:
			if !ok {
				return
			}
			if ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) == 0 || !cw.watched(ev.Name) {
				continue
			}
			timer.Reset(cw.opts.Debounce) // a burst of events makes one reload
		case err, ok := <-cw.w.Errors:
			if !ok {
				return
			}
			if cw.opts.Logger != nil {
				cw.opts.Logger.Warn("config watcher error; still watching", zap.Error(err))
			}
		case <-timer.C:
			cw.reload(ctx)
		}
	}
}

// read reads every file and hashes their bytes (names included).
func (cw *ConfigWatcher) read() ([]api.NamedDoc, [32]byte, error) {
	h := sha256.New()
	docs := make([]api.NamedDoc, 0, len(cw.files))
	var errs []error
	for _, f := range cw.files {
		b, err := os.ReadFile(f)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			errs = append(errs, &api.ConfigError{File: f, Msg: "cannot read config file: " + err.Error(), Err: err})
			continue
		}
		h.Write([]byte(f))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
		docs = append(docs, api.NamedDoc{Name: f, Data: b})
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return docs, sum, errors.Join(errs...)
}

// reload loads the files and applies them; unchanged files are skipped.
func (cw *ConfigWatcher) reload(ctx context.Context) {
	docs, sum, err := cw.read()
	var cfg *api.Config
	if err == nil {
		if bytes.Equal(sum[:], cw.last[:]) {
			return
		}
		cfg, err = api.LoadBytes(docs...)
	}
	var snap ConfigSnapshot
	if err == nil {
		snap, err = cw.store.Update(ctx, "config", 0, func(cur *api.Config) (*api.Config, error) {
			if err := cw.store.fileGuard(cur, cfg, cw.files); err != nil {
				cw.refused.Inc()
				return nil, err
			}
			return cfg, nil
		})
	}
	if err == nil {
		cw.last = sum
	}
	if l := cw.opts.Logger; l != nil {
		if err != nil {
			l.Warn("config files changed but were not applied; the running config stays as it was",
				zap.Strings("files", cw.files), zap.Error(err))
		} else {
			l.Info("config files reloaded", zap.Strings("files", cw.files), zap.Uint64("config_version", snap.Version))
		}
	}
	if cw.opts.OnReload != nil {
		cw.opts.OnReload(snap, err)
	}
}
