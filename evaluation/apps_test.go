package evaluation

import "testing"

// TestAppsOnPools: every pool loads the five applications, and every model
// has a profile on each of the pool's hardware types at batches 1 to 32.
func TestAppsOnPools(t *testing.T) {
	for _, pool := range Pools {
		t.Run(pool, func(t *testing.T) {
			cfg, err := AppsOn(pool)
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Hardware) != 2 {
				t.Fatalf("%d hardware types; want 2", len(cfg.Hardware))
			}
			for _, a := range AppNames {
				s, _ := cfg.Session(a)
				for _, m := range s.Modules {
					ps := cfg.ProfilesOf(m.Model)
					if len(ps) != len(cfg.Hardware) {
						t.Errorf("%s: model %s has %d profiles; want %d", a, m.Model, len(ps), len(cfg.Hardware))
					}
					for _, p := range ps {
						if len(p.Entries) < 6 {
							t.Errorf("%s on %s: %d entries; want ≥ 6 (batches 1–32 at two concurrencies)", p.Model, p.Hardware, len(p.Entries))
						}
					}
				}
			}
		})
	}
	if _, err := AppsOn("nope"); err == nil {
		t.Error("AppsOn(nope): no error")
	}
}
