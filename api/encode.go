package api

import (
	"gopkg.in/yaml.v3"
)

// EncodeYAML writes cfg in the config file format, so that LoadBytes reads it
// back to an equal config (Source aside): durations as Go duration strings,
// concurrency 1 written out, the sections and field names of a config file.
// The admin API uses it to re-validate the running config with a change; the
// Consul cluster mode (scheduler/cluster) stores the running config and every
// published plan's config with it. Errors come from yaml.Marshal only.
func EncodeYAML(cfg *Config) ([]byte, error) {
	return yaml.Marshal(encodeDoc(cfg))
}

// The types below are the config's with its file's field names and without the
// embedded Source, which yaml.Marshal would write as a key.
type (
	hardwareDoc struct {
		Name  string  `yaml:"name"`
		Price float64 `yaml:"price"`
	}
	entryDoc struct {
		Batch       int    `yaml:"batch"`
		Concurrency int    `yaml:"concurrency"`
		Duration    string `yaml:"duration"`
	}
	profileDoc struct {
		Model    string     `yaml:"model"`
		Hardware string     `yaml:"hardware"`
		Entries  []entryDoc `yaml:"entries"`
	}
	moduleDoc struct {
		Name  string   `yaml:"name"`
		Model string   `yaml:"model"`
		Rate  float64  `yaml:"rate"`
		After []string `yaml:"after,omitempty,flow"`
	}
	sessionDoc struct {
		Name    string      `yaml:"name"`
		SLO     string      `yaml:"slo"`
		Modules []moduleDoc `yaml:"modules"`
	}
	backendDoc struct {
		ID       string `yaml:"id"`
		Address  string `yaml:"address"`
		Hardware string `yaml:"hardware"`
	}
	configDoc struct {
		Hardware   []hardwareDoc `yaml:"hardware,omitempty"`
		Profiles   []profileDoc  `yaml:"profiles,omitempty"`
		Sessions   []sessionDoc  `yaml:"sessions,omitempty"`
		Backends   []backendDoc  `yaml:"backends,omitempty"`
		Membership string        `yaml:"membership,omitempty"`
	}
)

func encodeDoc(cfg *Config) configDoc {
	d := configDoc{Membership: cfg.Membership}
	for _, h := range cfg.Hardware {
		d.Hardware = append(d.Hardware, hardwareDoc{h.Name, h.Price})
	}
	for _, p := range cfg.Profiles {
		pr := profileDoc{Model: p.Model, Hardware: p.Hardware}
		for _, e := range p.Entries {
			pr.Entries = append(pr.Entries, entryDoc{e.Batch, max(e.Concurrency, 1), e.Duration.D().String()})
		}
		d.Profiles = append(d.Profiles, pr)
	}
	for _, s := range cfg.Sessions {
		sd := sessionDoc{Name: s.Name, SLO: s.SLO.D().String(), Modules: make([]moduleDoc, len(s.Modules))}
		for i, m := range s.Modules {
			sd.Modules[i] = moduleDoc{Name: m.Name, Model: m.Model, Rate: m.Rate, After: m.After}
		}
		d.Sessions = append(d.Sessions, sd)
	}
	for _, b := range cfg.Backends {
		d.Backends = append(d.Backends, backendDoc{b.ID, b.Address, b.Hardware})
	}
	return d
}
