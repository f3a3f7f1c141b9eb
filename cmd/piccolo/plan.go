package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newPlanCmd is a placeholder until its issue lands.
func newPlanCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "plan",
		Short:  "(plan: not built yet)",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("plan is not built yet")
		},
	}
}
