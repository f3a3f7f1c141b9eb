package api

import (
	"go.yaml.in/yaml/v3"
)

// EncodeYAML writes cfg in the config file format, so that LoadBytes reads it
// back to an equal config (Source aside): the config types carry the file's
// field names as yaml tags, durations marshal as Go duration strings, and the
// embedded Source (all `yaml:"-"`) is inlined to nothing. The admin API uses
// it to re-validate the running config with a change; the Consul cluster mode
// (scheduler/cluster) stores the running config and every published plan's
// config with it. Errors come from yaml.Marshal only.
func EncodeYAML(cfg *Config) ([]byte, error) {
	return yaml.Marshal(cfg)
}
