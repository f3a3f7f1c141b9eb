// Package process is the `piccolo gateway` process: Run checks the flags'
// values, loads the -c files, picks the plan step the flags ask for (--trace:
// serving.TracePlanner; --plan: serving.FilePlanner; else serving.Plan), sets
// up the calibration (calibration.go: loaded from --calibration-file or the
// cluster's KV, stored every 10 s and on shutdown), starts the control plane
// (controlplane.StartGateway: the first plan live, the DAGRunner and the
// ConfigStore attached), the admin API, the -c file watcher and the KServe v2
// HTTP and gRPC servers (and the admin listener apart with --admin-listen),
// with the tenants file (tenants.go: --tenants loaded, watched, and a
// warning when a client port listens beyond loopback without it), and
// drains when the context ends.
//
// cmd/piccolo holds only the command's flags and passes them as Options; the
// errors name those flags (--listen, --dispatch, --trace...), as the command
// has always answered. Run is called once per process, from the command's
// goroutine; it starts its own serving goroutines and returns when the
// context ends and the drain is over, or at the first error. It is the
// gateway's counterpart of backends/process. Nothing here is on the request
// path: kserve, gateway and dataplane are. controlplane never imports this
// package; it keeps the config store, the admin API and the control loop.
package process
