package consultest

import (
	"net/http"
	"testing"
	"time"
)

func TestStartKillRestart(t *testing.T) {
	a := Start(t)
	get := func() (int, error) {
		c := &http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get("http://" + a.Addr() + "/v1/status/leader")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(); err != nil || code != http.StatusOK {
		t.Fatalf("fresh agent at %s: status %d, err %v; want 200", a.Addr(), code, err)
	}
	a.Kill()
	if a.Running() {
		t.Fatal("Running() after Kill: want false")
	}
	if _, err := get(); err == nil {
		t.Fatalf("killed agent at %s still answers", a.Addr())
	}
	a.Restart()
	if code, err := get(); err != nil || code != http.StatusOK {
		t.Fatalf("restarted agent at %s: status %d, err %v; want 200", a.Addr(), code, err)
	}
	a.Stop()
	if a.Running() {
		t.Fatal("Running() after Stop: want false")
	}
}
