// Package deploy holds Piccolo's deployment: the container image recipe
// (Dockerfile), the Kubernetes manifests (kubernetes/, kustomize base and
// overlays), the Consul Helm chart's values (consul/values.yaml) and their
// offline check (check/, a module of its own; `make deploy-check`).
//
// The Go package itself has no code: its benchmarks measure what the sizing
// in docs/deploy.md rests on, e.g. how a membership change fans out from one
// Consul agent to many gateways' watches (BenchmarkConsulFanOut).
package deploy
