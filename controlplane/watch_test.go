package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/internal/testharness"
)

// waitReload waits for the watcher's next report.
func waitReload(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no reload within 20 s", what)
		return nil
	}
}

func TestConfigWatcherReloads(t *testing.T) {
	h, full := startAdminHarness(t, adminConfig, 2)
	dir := t.TempDir()
	path := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(path, []byte(full), 0o644); err != nil {
		t.Fatal(err)
	}
	reports := make(chan error, 16)
	cw, err := StartConfigWatcher(context.Background(), h.store, []string{path},
		WatchOptions{Debounce: 100 * time.Millisecond, OnReload: func(_ ConfigSnapshot, err error) { reports <- err }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cw.Close() })
	infer := `{"inputs":[{"name":"input0","shape":[1,1],"datatype":"FP32","data":[1]}]}`

	// An in-place edit written in several pieces (as editors do): one reload.
	edited := strings.Replace(full, "slo: 1s", "slo: 800ms", 1)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	half := len(edited) / 2
	f.WriteString(edited[:half])
	f.Sync()
	f.WriteString(edited[half:])
	f.Close()
	if err := waitReload(t, reports, "in-place edit"); err != nil {
		t.Fatalf("in-place edit: %v", err)
	}
	if v := h.store.Current().Version; v != 2 {
		t.Errorf("version %d after one edited save, want 2 (one reload per burst)", v)
	}
	if sp := sessionPlan(*h.sw.Plan(), "pipe"); sp.SLOMs != 800 {
		t.Errorf("plan after the edit: pipe SLO %v ms, want 800", sp.SLOMs)
	}

	// An invalid edit: logged, refused, the running config and plan stay.
	if err := os.WriteFile(path, []byte(strings.Replace(edited, "rate: 20", "rate: -20", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	err = waitReload(t, reports, "invalid edit")
	if err == nil || !strings.Contains(err.Error(), "piccolo.yaml:") || !strings.Contains(err.Error(), "rate") {
		t.Errorf("invalid edit: %v; want the loader's error naming the file, line and field", err)
	}
	if v := h.store.Current().Version; v != 2 {
		t.Errorf("version %d after an invalid edit, want 2", v)
	}
	if status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/solo/infer", infer); status != 200 {
		t.Errorf("solo after an invalid edit: %d %v", status, m)
	}

	// A rename-replace save that deletes a session.
	i := strings.Index(edited, "  - name: solo")
	j := strings.Index(edited, "backends:")
	replaced := edited[:i] + edited[j:]
	tmp := filepath.Join(dir, ".piccolo.yaml.swp")
	if err := os.WriteFile(tmp, []byte(replaced), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if err := waitReload(t, reports, "rename-replace save"); err != nil {
		t.Fatalf("rename-replace save: %v", err)
	}
	if _, ok := h.store.Current().Config.Session("solo"); ok {
		t.Error("solo still in the config after the save that removed it")
	}
	if status, _ := testharness.HTTPDo(t, "POST", h.url+"/v2/models/solo/infer", infer); status != 404 {
		t.Errorf("solo after its removal: %d, want 404", status)
	}
	if status, m := testharness.HTTPDo(t, "POST", h.url+"/v2/models/pipe/infer", infer); status != 200 {
		t.Errorf("pipe after solo's removal: %d %v", status, m)
	}
}

func TestConfigStoreSerialises(t *testing.T) {
	cfg, err := api.LoadBytes(api.NamedDoc{Name: "c.yaml", Data: []byte(testharness.ChainProfiles)})
	if err != nil {
		t.Fatal(err)
	}
	var inApply, overlaps int
	store, err := NewConfigStore(cfg, func(ctx context.Context, c *api.Config, cause string) error {
		inApply++
		if inApply > 1 {
			overlaps++
		}
		time.Sleep(time.Millisecond)
		inApply--
		if c.Sessions[0].SLO.D() == 0 {
			return context.Canceled
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			_, err := store.Update(context.Background(), "manual", 0, func(cur *api.Config) (*api.Config, error) {
				next := *cur
				return &next, nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	for range 8 {
		<-done
	}
	if overlaps != 0 || store.Current().Version != 9 {
		t.Errorf("overlapping applies %d, version %d; want 0 and 9", overlaps, store.Current().Version)
	}
}
