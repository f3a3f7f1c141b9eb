package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newGatewayCmd is a placeholder until its issue lands.
func newGatewayCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gateway",
		Short:  "(gateway: not built yet)",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("gateway is not built yet")
		},
	}
}
