// Command check is the offline validation of deploy/ that `make deploy-check`
// (scripts/deploy-check.sh) runs; it is a module of its own so that the
// BuildKit parser stays out of Piccolo's go.mod.
//
//	check dockerfile FILE        parse FILE with BuildKit's Dockerfile parser and
//	                             run its linter (every rule, experimental too);
//	                             fail on any warning, and unless the final stage
//	                             runs as a non-root USER
//	check schemas SWAGGER DIR    write one standalone, strict JSON schema per
//	                             Kubernetes kind of the OpenAPI v2 file SWAGGER
//	                             into DIR, named as kubeconform looks them up:
//	                             <kind>-<group>-<version>.json (core: <kind>-<version>.json)
//	check crd CRD.yaml DIR       the same for each served version of a
//	                             CustomResourceDefinition (KEDA's ScaledObject)
//
// No Docker engine and no network are needed; docs/deploy.md says what this
// checks and what only a real build would.
package main

import (
	"fmt"
	"os"
)

func main() {
	var err error
	switch {
	case len(os.Args) == 3 && os.Args[1] == "dockerfile":
		err = checkDockerfile(os.Args[2])
	case len(os.Args) == 4 && os.Args[1] == "schemas":
		err = writeSchemas(os.Args[2], os.Args[3])
	case len(os.Args) == 4 && os.Args[1] == "crd":
		err = writeCRDSchemas(os.Args[2], os.Args[3])
	default:
		err = fmt.Errorf("usage: check dockerfile FILE | check schemas SWAGGER.json DIR | check crd CRD.yaml DIR")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "check:", err)
		os.Exit(1)
	}
}
