package tenants

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// debounce is how long the file's directory must stay quiet after an event
// before the file is read again: an editor or a Secret update writes several
// times.
const debounce = 250 * time.Millisecond

// Watch reloads the tenants file at path into t whenever its directory
// changes (an in-place write, an editor's rename over it, a mounted
// Secret's symlink swap), until ctx ends, on a goroutine of its own. A file
// that reads as before is skipped; one that does not load is logged at
// error with the reason and the tenants in force stay; onReload, when set,
// is told of each attempt (nil error: applied). The caller has loaded the
// file once and Set it. It fails when the directory cannot be watched.
func Watch(ctx context.Context, path string, t *Tenants, log *zap.Logger, onReload func(error)) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("--tenants %s: %w", path, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("--tenants %s: watch: %w", path, err)
	}
	if err := w.Add(filepath.Dir(abs)); err != nil {
		w.Close()
		return fmt.Errorf("--tenants %s: watch its directory: %w", path, err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	last := hashFile(abs)
	go func() {
		defer w.Close()
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				timer.Reset(debounce)
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("tenants file watcher error; still watching", zap.String("file", abs), zap.Error(err))
			case <-timer.C:
				h := hashFile(abs)
				if bytes.Equal(h, last) {
					continue
				}
				f, err := Load(abs)
				if err != nil {
					log.Error("tenants file not reloaded; the tenants in force stay", zap.String("file", abs), zap.Error(err))
				} else {
					t.Set(f)
					last = h
					log.Info("tenants file reloaded", zap.String("file", abs), zap.Strings("tenants", t.Names()))
				}
				if onReload != nil {
					onReload(err)
				}
			}
		}
	}()
	return nil
}

// hashFile is the SHA-256 of the file's bytes, nil when it does not read.
func hashFile(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	h := sha256.Sum256(b)
	return h[:]
}
