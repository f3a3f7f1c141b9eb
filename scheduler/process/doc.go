// Package process is the `piccolo scheduler` process: Run checks the flags'
// values, loads the -c files that seed the cluster's config, and runs a
// standalone re-planner candidate (scheduler/cluster.Replanner: the elected
// one plans with serving.Plan, places and publishes through Consul KV), with
// its /metrics and /healthz, until the context ends and it has stepped down.
//
// cmd/piccolo holds only the command's flags and passes them as Options; the
// errors name those flags. Run is called once per process, from the
// command's goroutine. It is the scheduler's counterpart of backends/process
// and gateway/process; a gateway started with --consul --schedule runs the
// same candidate inside its own process (controlplane.ConsulControl).
package process
