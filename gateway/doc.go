// Package gateway runs sessions: DAGRunner executes a session's DAG of modules
// over a ModuleRunner, with admission control, and defines the errors every
// layer above returns. A session is exposed as one model, as a Triton
// ensemble is. The name DAGRunner (not Executor) keeps it apart from
// backends.Executor, which runs one model on one backend.
//
// Who calls what: the KServe edge (package kserve) decodes a request into an
// InferRequest and calls DAGRunner.Infer on the connection's goroutine; the
// ModuleRunner (package dataplane in production, fakes in tests) batches and
// dispatches each module's items; the control plane (package controlplane)
// swaps the sessions with SetSessions. This package imports only api: it knows
// nothing of HTTP, gRPC, dispatchers or backends.
//
// # Request path
//
// DAGRunner.Infer blocks the calling goroutine until the response is ready:
//
//  1. look up the session (ErrUnknownSession); when the runner knows its models'
//     tensors (MetadataSource), check the inputs against the source modules'
//     declared datatypes and shapes (ErrBadInput) before anything is queued;
//  2. admission: the deadline is arrival + the session's SLO (or the client's own
//     deadline if earlier); when the longest path through the DAG, with every module
//     costing what ModuleRunner.Estimate says (queue wait + batch duration), ends
//     after the deadline, the request is rejected at once with ErrOverloaded
//     instead of being queued to miss it;
//  3. run the DAG: each module starts when all its parents have resolved, by
//     calling ModuleRunner.Run, which returns at once and calls back from the
//     runner's goroutine; children of one module run concurrently; an
//     ArrivalObserver is told of each request before admission (Arrived),
//     and a ModuleArrivalObserver of the items reaching each module with
//     parents as it starts (ModuleArrived: branches and fan-outs as they
//     happen, what the control plane's rate monitor plans from);
//  4. answer with the sink modules' outputs and, as response parameters,
//     "piccolo.<module>.queue_ms", ".compute_ms", ".total_ms" and "piccolo.e2e_ms".
//  5. a request that returns without its response (ctx cancelled: the client
//     went away; the deadline passed; a module failed) abandons its items:
//     Call.Abandoned is set, and an Abandoner runner takes those still queued
//     out at once (docs/protocol.md, "Timeout, priority and cancellation").
//
// The deadline of step 2 is also tightened by the request's own timeout
// (InferRequest.Timeout), and its priority (InferRequest.Priority, Triton's)
// gives the class every item carries in its Call.
//
// Errors are values wrapping one sentinel (ErrBadInput, ErrUnknownSession,
// ErrTooLarge, ErrOverloaded, ErrDeadline, ErrUnavailable, ErrBackend,
// ErrCancelled; BadInput
// and WrapBackend build them), mapped once, at the edge, by kserve.HTTPStatus
// and kserve.GRPCCode.
//
// Metadata (CheckSession, Metadata) answers what KServe's model metadata and
// readiness endpoints need without exposing the DAG.
//
// # DAG semantics
//
//   - Sources (modules without `after`) get the request's inputs.
//   - A module with one parent that ran gets that parent's outputs; with several,
//     the concatenation of their outputs in `after` order. A tensor name output by
//     two parents is kept from the first and renamed "<parent>.<name>" from later
//     ones (the same rule names the response's outputs when two sinks collide).
//   - Branch: a module with children that outputs a tensor named "branch"
//     (BranchOutput; INT32/INT64 child indexes in session order, or BYTES child
//     names) runs only the chosen children. A module runs when every parent has
//     resolved and at least one parent that ran chose it; otherwise it is skipped,
//     and a skip propagates the same way, so A→{B|C}→D runs D after whichever of B
//     and C ran. Skipped sinks contribute no outputs.
//   - Fan-out: a module with exactly one parent and a higher configured rate than
//     that parent (more items than requests: e.g. one recognition per detected box)
//     receives one item per element of dimension 0 of the parent's outputs (all of
//     which must agree on dimension 0), each shaped [1, rest...]; the items run
//     concurrently and their outputs are joined back on dimension 0 in item order
//     before its children or the response see them. Zero elements: the module is
//     skipped. A child with one parent that fans out and the same rate as it
//     fans out too (its items are the parent's elements again), so a chain such
//     as box → classify → recognize runs one item per box all along and is
//     batched per box; a lower rate (e.g. a per-request summary) gets the joined
//     tensors as one item.
//   - anyof (api.JoinAnyOf, Cloudflow's anyof operator): a module with `join:
//     anyof` runs on the outputs of the first of its parents to finish, alone;
//     the other parents' branches (each parent and the chain of modules that
//     feed only it) are cut: their modules not yet resolved never start or
//     have their results dropped, and their items, which carry a Call of
//     their branch's own, are abandoned (Abandoner takes those still queued
//     out). A branch that fails leaves the race to the others; the request
//     fails only when none is left. A skipped parent does not win; all
//     skipped, the module is skipped. Admission counts the shortest branch
//     (api.LongestPath). Each parent must feed the anyof module alone.
//   - The first failure of any other module fails the request once, with the
//     module's name; the request's context is then cancelled and later
//     results ignored.
//
// # Concurrency
//
// DAGRunner's session table is an immutable snapshot swapped atomically by
// SetSessions. A request's run state is private to it; hand-overs between runner
// goroutines go through atomics. Tensors passed to Run belong to the runner from
// then on; the DAGRunner never writes to them.
package gateway
