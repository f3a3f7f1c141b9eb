package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newBackendCmd is a placeholder until its issue lands.
func newBackendCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "backend",
		Short:  "(backend: not built yet)",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("backend is not built yet")
		},
	}
}
