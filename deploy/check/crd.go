package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// writeCRDSchemas writes, for each served version of the CustomResourceDefinition
// in the YAML file crd, the standalone, strict JSON schema of its
// openAPIV3Schema into dir, named as kubeconform looks it up
// (<kind>-<first label of the group>-<version>.json) and made strict the same
// way as the built-in kinds' (the converter of schemas.go: additionalProperties
// false where properties are listed, x-kubernetes-* and descriptions dropped,
// apiVersion and kind pinned). An autoscaler's resources (KEDA's ScaledObject)
// are validated with it.
func writeCRDSchemas(crd, dir string) error {
	raw, err := os.ReadFile(crd)
	if err != nil {
		return err
	}
	var doc struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Group string `yaml:"group"`
			Names struct {
				Kind string `yaml:"kind"`
			} `yaml:"names"`
			Versions []struct {
				Name   string `yaml:"name"`
				Served bool   `yaml:"served"`
				Schema struct {
					OpenAPIV3Schema map[string]any `yaml:"openAPIV3Schema"`
				} `yaml:"schema"`
			} `yaml:"versions"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: %w", crd, err)
	}
	if doc.Kind != "CustomResourceDefinition" || doc.Spec.Group == "" || doc.Spec.Names.Kind == "" {
		return fmt.Errorf("%s: kind %q, group %q, names.kind %q: want a CustomResourceDefinition", crd, doc.Kind, doc.Spec.Group, doc.Spec.Names.Kind)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	c := converter{seen: map[string]bool{}}
	n := 0
	for _, v := range doc.Spec.Versions {
		if !v.Served || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		s := c.schema(v.Schema.OpenAPIV3Schema)
		props, _ := s["properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
			s["properties"] = props
		}
		props["apiVersion"] = map[string]any{"type": "string", "enum": []any{doc.Spec.Group + "/" + v.Name}}
		props["kind"] = map[string]any{"type": "string", "enum": []any{doc.Spec.Names.Kind}}
		props["metadata"] = map[string]any{"type": "object"} // checked by the API server, as for every CRD
		out, err := json.Marshal(s)
		if err != nil {
			return fmt.Errorf("%s version %s: %w", crd, v.Name, err)
		}
		file := strings.ToLower(doc.Spec.Names.Kind) + "-" + strings.ToLower(strings.Split(doc.Spec.Group, ".")[0]) + "-" + v.Name + ".json"
		if err := os.WriteFile(filepath.Join(dir, file), out, 0o644); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s: no served version with an openAPIV3Schema", crd)
	}
	fmt.Printf("wrote %d schema(s) of %s.%s to %s\n", n, doc.Spec.Names.Kind, doc.Spec.Group, dir)
	return nil
}
