package demo

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/piccolo-serving/piccolo/dispatcher"
)

// served is how the demo's gateway serves, as far as its plan and the
// simulated column depend on it: the flush rule, the dispatch and whether
// admission is on, read from Options.GatewayArgs (the gateway's --flush,
// --dispatch and --admission) over the gateway's defaults. The demo plans
// with these, as the gateway's own burst check does, so that
// `--gateway-arg=--flush=deadline` plans, serves and simulates one flush.
type served struct {
	flush     dispatcher.Flush  // nil: the gateway's default (idle)
	dispatch  dispatcher.Policy // nil: the policy's own (round robin for the baselines, else TC)
	admission bool
}

// gatewayServed is how a gateway given no --gateway-arg serves: its default
// flush and dispatch, admission on.
var gatewayServed = served{admission: true}

// servedBy reads served from args, the demo's --gateway-arg values; the
// gateway's other flags are passed through unread. A --flush or --dispatch
// the gateway would refuse is refused here, naming the values allowed.
func servedBy(args []string) (served, error) {
	fs := pflag.NewFlagSet("gateway-arg", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetOutput(io.Discard) // the demo names a bad value in its own error
	flush := fs.String("flush", "", "")
	dispatch := fs.String("dispatch", "", "")
	admission := fs.Bool("admission", true, "")
	if err := fs.Parse(args); err != nil {
		return served{}, fmt.Errorf("demo: --gateway-arg: %w", err)
	}
	s := served{admission: *admission}
	if *flush != "" {
		f, err := dispatcher.ParseFlush(*flush)
		if err != nil {
			return served{}, fmt.Errorf("demo: --gateway-arg=--flush=%s: %w", *flush, err)
		}
		s.flush = f
	}
	if *dispatch != "" {
		p, err := dispatcher.ParsePolicy(*dispatch)
		if err != nil {
			return served{}, fmt.Errorf("demo: --gateway-arg=--dispatch=%s: %w", *dispatch, err)
		}
		s.dispatch = p
	}
	return s, nil
}
