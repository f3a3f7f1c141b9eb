// Package membership says which backends are alive: the backend set the control
// loop places plans on and the gateways dispatch to. It has one interface and
// two implementations, plus the backend side of Consul registration.
//
// Membership.Watch(ctx, fn) calls fn with a Snapshot at once and then on every
// change, from the goroutine that called Watch, until ctx ends. A Snapshot is
// immutable: Members sorted by ID (each with ID, gRPC Address, Hardware, Price
// and, when known, GPU name and memory and the Models it can run), Stale when
// the source is unreachable (Members is then the last view seen, Err says
// why), At, Source. Snapshot.Backends gives the []api.Backend that
// placement.Members and metrics.Metrics.SetMembership take; ByHardware the counts.
// fn runs on the watcher's goroutine: it should hand the snapshot over and
// return; while it runs, further changes coalesce into the next call.
// Updates(ctx, m) does that hand-over: it runs Watch on its own goroutine and
// returns a channel that always holds the latest snapshot (the control loop's
// select reads it).
//
// Static (membership `static`, the embedded default) is the config's backends
// list priced from its hardware catalog: one snapshot, never stale.
//
// Consul (membership `consul`; NewConsul(addr, ConsulOptions)) lists the
// instances of service ServiceName ("piccolo-backend") whose checks pass, with
// blocking queries on /v1/health/service (WaitIndex), so a change reaches fn as
// soon as the agent sees it (docs/control-plane.md has the measured delay).
// Registrations with malformed metadata are left out and named in Snapshot.Err;
// so are, with ConsulOptions.BackendToken, those without the backend
// credential (meta auth: Credential, an HMAC of the id and address keyed
// with the token; Verify), and they are logged.
// When Consul is unreachable Watch gives one Stale snapshot with the last members
// (the gateway keeps serving them), logs once, retries with jittered backoff
// from 50 ms up to ConsulOptions.MaxBackoff (2 s), and gives a fresh snapshot
// when Consul answers again.
//
// Register / RegisterWith (backend side; `piccolo backend --consul ADDR`)
// register one Member with the local agent: service ServiceName, ID = Member.ID,
// Meta keys hardware, price, gpu, gpu_memory (bytes), models (comma-joined),
// auth (with RegisterOptions.BackendToken, the registration's Credential),
// a TCP check on the gRPC address every CheckInterval (1 s, Consul's minimum)
// with DeregisterCriticalAfter (1 min, Consul's minimum). They keep the
// registration alive across agent restarts and return deregister, to call on
// graceful shutdown.
//
// NewClient is the one constructor of every Consul client in Piccolo (the
// watcher, Register, scheduler/cluster): consul/api's DefaultConfig (the
// CONSUL_* environment) with ConsulAuth's token and TLS files over it.
//
// Everything here is safe for concurrent use; a Watch call owns its goroutine.
package membership
