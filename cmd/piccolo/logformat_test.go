package main

import (
	"testing"

	"go.uber.org/zap"
)

// nopLog is a log format from outside the built-in ones.
type nopLog struct{}

func (nopLog) Name() string              { return "none" }
func (nopLog) New() (*zap.Logger, error) { return zap.NewNop(), nil }

// TestLogFormats: --log's names are checked in one place, the error lists
// them, and a format registered beside them is chosen by name.
func TestLogFormats(t *testing.T) {
	for _, name := range []string{"json", "console"} {
		lf, err := parseLogFormat(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if log, err := lf.New(); err != nil || log == nil {
			t.Errorf("%s: New() = %v, %v", name, log, err)
		}
	}
	if _, err := parseLogFormat("xml"); err == nil || err.Error() != `--log "xml": allowed: json, console` {
		t.Errorf("parseLogFormat(xml) = %v; want the allowed formats", err)
	}
	more, err := logFormats.With(nopLog{})
	if err != nil {
		t.Fatal(err)
	}
	lf, err := more.Lookup("none")
	if err != nil {
		t.Fatal(err)
	}
	if log, err := lf.New(); err != nil || log.Core().Enabled(zap.ErrorLevel) {
		t.Errorf("none: New() = %v, %v; want the no-op logger", log, err)
	}
	if logFlagHelp != "log format: json or console" {
		t.Errorf("--log help %q", logFlagHelp)
	}
}
