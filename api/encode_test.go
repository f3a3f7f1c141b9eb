package api_test

import (
	"reflect"
	"testing"

	"github.com/piccolo-serving/piccolo/api"
)

// stripSources clears every Source so configs read from different files compare.
func stripSources(c *api.Config) {
	for i := range c.Hardware {
		c.Hardware[i].Source = api.Source{}
	}
	for i := range c.Profiles {
		c.Profiles[i].Source = api.Source{}
		for j := range c.Profiles[i].Entries {
			c.Profiles[i].Entries[j].Source = api.Source{}
		}
	}
	for i := range c.Sessions {
		c.Sessions[i].Source = api.Source{}
		for j := range c.Sessions[i].Modules {
			c.Sessions[i].Modules[j].Source = api.Source{}
			for k := range c.Sessions[i].Modules[j].Variants {
				c.Sessions[i].Modules[j].Variants[k].Source = api.Source{}
			}
		}
		for j := range c.Sessions[i].JointAccuracy {
			c.Sessions[i].JointAccuracy[j].Source = api.Source{}
		}
	}
	for i := range c.Backends {
		c.Backends[i].Source = api.Source{}
	}
}

// EncodeYAML's output must load back to the same config: the cluster mode
// stores configs this way and every gateway re-reads them.
func TestEncodeYAMLRoundTrip(t *testing.T) {
	for _, files := range [][]string{
		{"../configs/paper/profiles.yaml", "../configs/paper/sessions.yaml"},
		{"../configs/demo/paper-gpus.yaml"},
		{"../configs/ocr.yaml"},
		{"../configs/ocr.yaml", "../configs/ocr-variants.yaml"}, // variants and joint accuracies
		{"../simulate/testdata/fanout.yaml"},                    // a fan-out distribution
		{"testdata/link.yaml"},                                  // a link and items' bytes
		{"../simulate/testdata/race.yaml"},                      // race: auto and a tail
	} {
		cfg, err := api.Load(files...)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Backends = append(cfg.Backends, api.Backend{ID: "b-1", Address: "127.0.0.1:9", Hardware: cfg.Hardware[0].Name})
		b, err := api.EncodeYAML(cfg)
		if err != nil {
			t.Fatal(err)
		}
		back, err := api.LoadBytes(api.NamedDoc{Name: "encoded", Data: b})
		if err != nil {
			t.Fatalf("%v: the encoded config does not load: %v\n%s", files, err, b)
		}
		stripSources(cfg)
		stripSources(back)
		for i := range cfg.Profiles { // the loader fills concurrency 1 in (a hand-built 0 is written as 0, which loads as 1)
			for j := range cfg.Profiles[i].Entries {
				cfg.Profiles[i].Entries[j].Concurrency = max(cfg.Profiles[i].Entries[j].Concurrency, 1)
			}
		}
		if !reflect.DeepEqual(cfg, back) {
			t.Errorf("%v: round trip changed the config:\nbefore %+v\nafter  %+v", files, cfg, back)
		}
	}
}
