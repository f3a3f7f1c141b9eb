package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newSimulateCmd is a placeholder until its issue lands.
func newSimulateCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "simulate",
		Short:  "(simulate: not built yet)",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("simulate is not built yet")
		},
	}
}
