package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newLoadgenCmd is a placeholder until its issue lands.
func newLoadgenCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "loadgen",
		Short:  "(loadgen: not built yet)",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("loadgen is not built yet")
		},
	}
}
