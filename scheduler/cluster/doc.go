// Package cluster runs Piccolo's control plane across processes through Consul
// (issue 4, "Distribution"): several gateways and several scheduler candidates
// share one config and one plan, and exactly one candidate — the leader,
// elected with a Consul lock — plans.
//
// Consul KV layout, under a prefix (default "piccolo", so clusters can share an
// agent):
//
//	<prefix>/config            the running config, YAML in the config file format
//	                           (api.EncodeYAML; no backends). Written with
//	                           check-and-set by whoever changes it (a gateway's
//	                           admin API or file watcher); seeded when absent
//	                           by the leader: with the last config it saw
//	                           here, else its own -c files.
//	<prefix>/config-plan       the plan the writer of <prefix>/config made and
//	                           checked for it (ConfigPlan, JSON), written in the
//	                           same transaction (same ModifyIndex): the leader
//	                           places it instead of planning the config again.
//	<prefix>/plan              the published plan: a Record (JSON) holding the
//	                           placed plan and the config it serves, backends
//	                           included, so a gateway applies both in one swap.
//	                           Written only by the leader, in a transaction that
//	                           first checks the leader still holds the lock (a
//	                           deposed leader cannot overwrite its successor).
//	<prefix>/scheduler/leader  the lock; its value names the leader.
//	<prefix>/rates/<gateway>   each gateway's rate monitor snapshot (JSON,
//	                           replan.RateSnapshot), rewritten every second.
//	<prefix>/history/<version> one version of the config history (20-digit
//	                           version; opaque JSON, controlplane's), created
//	                           only if absent in the config's own transaction
//	                           (PutConfigLogged), so its ModifyIndex is the
//	                           config's; the oldest deleted there too.
//	<prefix>/calibration/<gateway>  each gateway's calibration (JSON,
//	                           calibrate.Estimator.Marshal), rewritten every
//	                           few seconds; the leader merges them with its
//	                           own every CalibrationEvery (Followed).
//
// Roles:
//
//   - Follower (every gateway): Client.WatchPlan delivers each new Record;
//     the gateway swaps plan and sessions in atomically (dataplane.LiveSwitch).
//     Client.PutRates reports the gateway's measured rates; Client.PutConfig
//     publishes an operator's change (check-and-set on the config's index).
//   - Candidate (a gateway with its scheduler on, or `piccolo scheduler`):
//     Replanner.Run campaigns for the lock; while it leads it runs a
//     replan.Controller fed by the Consul membership, the config key and the
//     rates keys, and publishes each decision as a Record. A standby
//     candidate blocks on the lock and takes over when the leader's session
//     ends.
//
// Failover: a candidate registers service "piccolo-scheduler" with a TTL check
// it passes every TTL/4 and ties its lock session to that check (and to the
// node's serfHealth). A leader that is SIGKILLed stops passing the check, the
// check goes critical after the TTL (default 2 s), Consul invalidates the
// session and releases the lock, and a standby acquires it (lock delay 1 ms,
// not Consul's default 15 s, because the fencing transaction already stops a
// deposed leader from publishing). A leader that stops cleanly releases the
// lock at once. When Consul is unreachable the leader steps down (it could
// not publish anyway) and gateways keep serving the last Record they applied.
//
// Every method is safe from any goroutine. Nothing here is on the request
// path: the gateway's counters are read by its own reporting loop.
package cluster
