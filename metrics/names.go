package metrics

// The names of Piccolo's metrics, as served on GET /metrics. Readers (piccolo
// status, tests, dashboards generated from code) use these constants, never
// copies of the strings. docs/observability.md explains each one.
const (
	// Per request (kserve):
	GatewayRequestsTotal            = "piccolo_gateway_requests_total"
	GatewayRequestSeconds           = "piccolo_gateway_request_seconds"
	GatewaySLOViolationsTotal       = "piccolo_gateway_slo_violations_total"
	GatewayAdmissionRejectionsTotal = "piccolo_gateway_admission_rejections_total"
	// GatewayPanicsTotal counts panics recovered while serving requests, by
	// where they were recovered (http, grpc, module, batch, timer, goroutine):
	// each answered 500 / INTERNAL with its request id (api.Recovered).
	GatewayPanicsTotal = "piccolo_gateway_panics_total"
	// GatewayInflightBytes is the request bytes held by requests in flight
	// (kserve's in-flight budget, --max-inflight-bytes); GatewayInflightRefusedTotal
	// counts the requests refused because the budget was full (503 + Retry-After).
	GatewayInflightBytes        = "piccolo_gateway_inflight_bytes"
	GatewayInflightRefusedTotal = "piccolo_gateway_inflight_refused_total"

	// Tenants (package tenants, --tenants): requests admitted per tenant, and
	// requests refused by tenant and reason (missing_key, unknown_key: tenant
	// ""; rate, concurrency, priority).
	GatewayTenantRequestsTotal = "piccolo_gateway_tenant_requests_total"
	GatewayTenantRefusedTotal  = "piccolo_gateway_tenant_refused_total"

	// The door, the gateway's own overload control (kserve.OverloadStats,
	// collected at scrape time): infer requests refused before decoding, the
	// limit on those in flight, those in flight, the scheduling delay it
	// measured.
	GatewayDoorShedTotal    = "piccolo_gateway_door_shed_total"
	GatewayDoorLimit        = "piccolo_gateway_door_limit"
	GatewayDoorInFlight     = "piccolo_gateway_door_in_flight"
	GatewayDoorDelaySeconds = "piccolo_gateway_door_delay_seconds"
	GatewayDoorHeldTotal    = "piccolo_gateway_door_held_total"
	GatewayDoorFloor        = "piccolo_gateway_door_floor"

	// Per module item and batch (dataplane):
	GatewayModuleQueueSeconds   = "piccolo_gateway_module_queue_seconds"
	GatewayModuleComputeSeconds = "piccolo_gateway_module_compute_seconds"
	GatewayBatchSize            = "piccolo_gateway_batch_size"
	GatewayFanOutItems          = "piccolo_gateway_fanout_items"
	GatewayModuleOutstanding    = "piccolo_gateway_module_outstanding"

	// Per dispatcher, collected at scrape time (dataplane.LiveRunner):
	DispatcherItemsTotal           = "piccolo_dispatcher_items_total"
	DispatcherDummiesTotal         = "piccolo_dispatcher_dummies_total"
	DispatcherBatchesClosedTotal   = "piccolo_dispatcher_batches_closed_total"
	DispatcherBatchesTotal         = "piccolo_dispatcher_batches_total"
	DispatcherSlotItemsTotal       = "piccolo_dispatcher_slot_items_total"
	DispatcherSlotDummiesTotal     = "piccolo_dispatcher_slot_dummies_total"
	DispatcherSlotBusySecondsTotal = "piccolo_dispatcher_slot_busy_seconds_total"
	DispatcherSlotLanes            = "piccolo_dispatcher_slot_lanes"
	DispatcherSlotPlannedRate      = "piccolo_dispatcher_slot_planned_rate"
	// DispatcherOverflowBatchesTotal counts a module's batches sent to a spare
	// machine (a backend its plan leaves idle) because its planned machines
	// were saturated; the spare machines' own batches, items and busy time are
	// the slot metrics above with slot "spare<i>".
	DispatcherOverflowBatchesTotal = "piccolo_dispatcher_overflow_batches_total"
	// DispatcherLateCommittedBatchesTotal counts a module's batches sent to
	// an idle machine of another of its planned groups because their own
	// group's would have ended them late (gateway --late-commit,
	// docs/dataplane.md "Late commit").
	DispatcherLateCommittedBatchesTotal = "piccolo_dispatcher_late_committed_batches_total"
	// DispatcherLocalBatchesTotal counts a module's batches sent to a free
	// machine on the backend holding their inputs (gateway --locality-bytes,
	// docs/locality.md).
	DispatcherLocalBatchesTotal = "piccolo_dispatcher_local_batches_total"
	// GatewayOccupiedMachineSecondsTotal is the machine time a module's
	// batches occupied, by hardware type, summed over every plan served since
	// the gateway started (dataplane.LiveSwitch): what its occupancy is
	// charged on.
	GatewayOccupiedMachineSecondsTotal = "piccolo_gateway_occupied_machine_seconds_total"
	// GatewayDeviceMachineSecondsTotal is the part of
	// GatewayOccupiedMachineSecondsTotal the devices ran: the compute time
	// the backends reported with their answers, over the slot's lanes,
	// summed the same way. The rest of the occupied time is the round trip
	// and the backend's queue (docs/evaluation.md, "Every policy live beside
	// its simulation").
	GatewayDeviceMachineSecondsTotal = "piccolo_gateway_device_machine_seconds_total"
	// DispatcherClassItemsTotal counts a module's items by priority class
	// (high, normal, low) and outcome (submitted, overloaded).
	DispatcherClassItemsTotal = "piccolo_dispatcher_class_items_total"

	// Per backend, faults (dataplane.Health, collected at scrape time):
	GatewayRetriesTotal          = "piccolo_gateway_retries_total"
	GatewayHedgesTotal           = "piccolo_gateway_hedges_total"
	GatewayHedgeSecondsTotal     = "piccolo_gateway_hedge_seconds_total"
	GatewayRacesTotal            = "piccolo_gateway_races_total"
	GatewayRaceSecondsTotal      = "piccolo_gateway_race_seconds_total"
	GatewayBatchesSentTotal      = "piccolo_gateway_batches_sent_total"
	GatewayBackendUp             = "piccolo_gateway_backend_up"
	GatewayBackendSlowness       = "piccolo_gateway_backend_slowness"
	GatewayBackendEjectionsTotal = "piccolo_gateway_backend_ejections_total"
	// The network-and-host share of a backend's batches: the gateway's round
	// trip less the time the backend reported (queue and compute).
	GatewayBackendHostSeconds = "piccolo_gateway_backend_host_seconds"

	// Per calibration series (model, hardware, device, batch, concurrency;
	// calibrate.Estimator, collected at scrape time, docs/calibration.md):
	// the offline profile's duration, the measured estimate (the window's
	// high quantile) and the batches the window holds.
	CalibrationProfiledSeconds = "piccolo_calibration_profiled_seconds"
	CalibrationMeasuredSeconds = "piccolo_calibration_measured_seconds"
	CalibrationSamples         = "piccolo_calibration_samples"
	// A model's measured slowdown on a device the plan shares with other
	// models against alone (calibrate.Estimator.Colocations).
	CalibrationColocationSlowdown = "piccolo_calibration_colocation_slowdown"

	// Per plan and membership (controlplane):
	PlanCost                = "piccolo_plan_cost"
	PlanTimestampSeconds    = "piccolo_plan_timestamp_seconds"
	PlannerSeconds          = "piccolo_planner_seconds"
	PlanReplansTotal        = "piccolo_plan_replans_total"
	PlanSessionCost         = "piccolo_plan_session_cost"
	PlanSessionSLOSeconds   = "piccolo_plan_session_slo_seconds"
	PlanModuleBudgetSeconds = "piccolo_plan_module_budget_seconds"
	PlanModuleWCLSeconds    = "piccolo_plan_module_wcl_seconds"
	PlanModuleRate          = "piccolo_plan_module_rate"
	PlanMachines            = "piccolo_plan_machines"
	MembershipBackends      = "piccolo_membership_backends"
	PlanVersion             = "piccolo_plan_version"
	PlanSchedulerInfo       = "piccolo_plan_scheduler_info"
	MembershipStale         = "piccolo_membership_stale"
	PlanAgeSeconds          = "piccolo_plan_age_seconds"

	// Capacity asked of the cluster (controlplane; an autoscaler's input,
	// docs/deploy.md "Autoscaling"):
	CapacityDesiredMachines   = "piccolo_capacity_desired_machines"
	CapacityAvailableMachines = "piccolo_capacity_available_machines"

	// Per re-planner candidate (--consul):
	ReplannerLeader = "piccolo_replanner_leader"
	// SchedulerLeader is ReplannerLeader's name until this release, served
	// beside it for a release so dashboards and alerts can move; then
	// removed.
	SchedulerLeader = "piccolo_scheduler_leader"

	// ProcessStartTimeSeconds is the Go client's process collector's start
	// time, which every piccolo process serves.
	ProcessStartTimeSeconds = "process_start_time_seconds"
)
