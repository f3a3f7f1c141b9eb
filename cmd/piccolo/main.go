// Command piccolo is the one binary of the Piccolo inference gateway. Every
// subcommand is registered by hand here, so a reader sees the whole surface at once.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "piccolo",
		Short:         "Piccolo: an inference gateway with a batching load balancer",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newPlanCmd(),
		newSimulateCmd(),
		newBackendCmd(),
		newGatewayCmd(),
		newSchedulerCmd(),
		newLoadgenCmd(),
		newProfileCmd(),
		newDemoCmd(),
		newBenchCmd(),
		newStatusCmd(),
		newVersionCmd(),
	)
	root.Version = buildVersion()
	root.SetVersionTemplate("piccolo {{.Version}}\n")
	markUsageErrors(root)
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "piccolo", buildVersion())
		},
	}
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "piccolo:", err)
		if isUsageError(err) {
			fmt.Fprintln(os.Stderr, "Run 'piccolo help' or 'piccolo COMMAND --help' for usage.")
			os.Exit(2)
		}
		os.Exit(1)
	}
}
