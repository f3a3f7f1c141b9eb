package main

import (
	"errors"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// usageError is a command line that cobra or a command's Args refused: an
// unknown command or flag, a bad flag value, a wrong number of arguments.
// main exits 2 for it (the Unix convention for a usage error) and 1 for a
// command that ran and failed.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// markUsageErrors makes cmd and its subcommands report flag and argument
// errors as usageError.
func markUsageErrors(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		markUsageErrors(sub)
	}
}

// isUsageError reports whether err, from root.Execute, is a usage error. An
// unknown subcommand comes from cobra's own argument check (legacyArgs), which
// no hook wraps, so it is known by cobra's fixed text.
func isUsageError(err error) bool {
	var u usageError
	return errors.As(err, &u) || strings.HasPrefix(err.Error(), "unknown command ")
}

// buildVersion returns the version `piccolo version` and `piccolo --version`
// print: main.version when the build set it (-ldflags "-X main.version=v1.2.3"),
// else the module version the go command stamped (a `go install ...@v1.2.3`),
// else "dev"; with the VCS revision when the binary was built in a checkout
// ("dev (a1b2c3d4e5f6, modified)").
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version
	}
	v := version
	if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev != "" {
		v += " (" + rev[:min(12, len(rev))] + modified + ")"
	}
	return v
}
