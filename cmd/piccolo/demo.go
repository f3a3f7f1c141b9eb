package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newDemoCmd is a placeholder until its issue lands.
func newDemoCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "demo",
		Short:  "(demo: not built yet)",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("demo is not built yet")
		},
	}
}
