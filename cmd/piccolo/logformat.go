package main

import (
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/piccolo-serving/piccolo/internal/registry"
)

// logFormat is a way to write a process's log (--log of the backend, gateway
// and scheduler), chosen by name from logFormats: the one place the names
// are checked.
type logFormat interface {
	Name() string
	// New returns the process's logger.
	New() (*zap.Logger, error)
}

type jsonLog struct{}

func (jsonLog) Name() string              { return "json" }
func (jsonLog) New() (*zap.Logger, error) { return zap.NewProduction() }

type consoleLog struct{}

func (consoleLog) Name() string { return "console" }

// New returns a readable logger, without stack traces on warnings, and
// sampled like the production logger so a storm of failing requests cannot
// flood it.
func (consoleLog) New() (*zap.Logger, error) {
	cfg := zap.NewDevelopmentConfig()
	cfg.DisableStacktrace = true
	cfg.Sampling = &zap.SamplingConfig{Initial: 100, Thereafter: 100}
	return cfg.Build()
}

// logFormats are the --log values, the default first.
var logFormats = registry.Must(registry.New[logFormat]("log format", "log formats", jsonLog{}, consoleLog{}))

// logFlagHelp is --log's help: "log format: json or console".
var logFlagHelp = "log format: " + strings.Join(logFormats.Names(), " or ")

// parseLogFormat returns the --log format called name, or an error naming
// the allowed ones (the text the commands have always given).
func parseLogFormat(name string) (logFormat, error) {
	lf, err := logFormats.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("--log %q: allowed: %s", name, logFormats)
	}
	return lf, nil
}

// newLogger is the --log format called name's New, for a process's options:
// an unknown name is reported when the process makes its logger.
func newLogger(name string) func() (*zap.Logger, error) {
	return func() (*zap.Logger, error) {
		lf, err := parseLogFormat(name)
		if err != nil {
			return nil, err
		}
		return lf.New()
	}
}
