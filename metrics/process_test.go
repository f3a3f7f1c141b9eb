package metrics

import "testing"

// backend --metrics-listen and scheduler --listen turn off with the same two
// spellings.
func TestListenOff(t *testing.T) {
	for flag, want := range map[string]bool{"": true, "off": true, "127.0.0.1:0": false, "auto": false} {
		if got := ListenOff(flag); got != want {
			t.Errorf("ListenOff(%q) = %v, want %v", flag, got, want)
		}
	}
}
