package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newProfileCmd is a placeholder until its issue lands.
func newProfileCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "profile",
		Short:  "(profile: not built yet)",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("profile is not built yet")
		},
	}
}
