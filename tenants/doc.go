// Package tenants is who may use the gateway's data plane and how much: API
// keys, each mapping to a tenant, and each tenant's request rate,
// concurrency and highest priority class (docs/security.md, "Tenants").
//
// The tenants file (`piccolo gateway --tenants FILE`; a Kubernetes Secret
// mounted as that file works the same way) is YAML:
//
//	tenants:
//	  - name: team-a
//	    keys: [9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08]  # SHA-256 hex of each key
//	    rate: 50          # requests per second, token bucket (0 or absent: no limit)
//	    burst: 100        # bucket size (default: the rate rounded up, at least 1)
//	    concurrency: 16   # infer requests in flight at once (0 or absent: no limit)
//	    max_priority: high  # the highest class it may ask for: high, normal (default) or low
//
// Keys are stored hashed: the file holds the SHA-256 of each key as 64 hex
// digits (`printf %s "$KEY" | sha256sum`), never the key. Load and Parse
// refuse a file that does not read as above, naming the tenant, the field
// and what is allowed.
//
// Tenants (New) holds the table as an immutable snapshot swapped atomically
// on Set; the request path reads it without a lock. Identify (any goroutine)
// maps a key to its *Tenant or refuses it (ErrUnauthenticated: HTTP 401,
// gRPC UNAUTHENTICATED); Tenant.Admit takes one request of the tenant's rate
// and concurrency or refuses it (ErrLimited: 429 with Retry-After,
// RESOURCE_EXHAUSTED), Tenant.Done gives the concurrency back,
// Tenant.AllowClass refuses a priority class above the tenant's (ErrForbidden:
// 403, PERMISSION_DENIED). None of them allocates when the request is let
// in. A tenant's bucket, its requests in flight and its counters live on
// across reloads while its name stays in the file.
//
// Watch reloads the file when it changes (fsnotify on its directory, so an
// editor's rename and a Secret's symlink swap are both seen); a file that
// does not load is logged and the tenants in force stay.
//
// Metrics (registered by New): piccolo_gateway_tenant_requests_total{tenant}
// (infer requests admitted) and
// piccolo_gateway_tenant_refused_total{tenant,reason} (reason missing_key or
// unknown_key with tenant "", rate, concurrency or priority).
package tenants
