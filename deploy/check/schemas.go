package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// writeSchemas turns the definitions of a Kubernetes OpenAPI v2 document
// (api/openapi-spec/swagger.json of the k8s.io/kubernetes module) into the
// standalone, strict JSON schemas kubeconform reads, as openapi2jsonschema
// does for the schemas kubeconform downloads by default: every $ref inlined
// (a recursive one becomes "any value"), additionalProperties false on every
// object with properties, null allowed where a type is given, IntOrString and
// Quantity as string-or-number, and apiVersion and kind pinned per file.
// Descriptions are dropped: errors name the field, not its documentation.
//
// Own code, not openapi2jsonschema: that is a Python tool from PyPI, which the
// project's machines cannot install; this is the same transformation in 150
// lines with the standard library.
func writeSchemas(swagger, dir string) error {
	raw, err := os.ReadFile(swagger)
	if err != nil {
		return err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: %w", swagger, err)
	}
	if len(doc.Definitions) == 0 {
		return fmt.Errorf("%s: no definitions; want a Kubernetes OpenAPI v2 document", swagger)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	c := converter{defs: doc.Definitions, seen: map[string]bool{}}
	n := 0
	for name, def := range doc.Definitions {
		gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk, _ := g.(map[string]any)
			group, _ := gvk["group"].(string)
			version, _ := gvk["version"].(string)
			kind, _ := gvk["kind"].(string)
			if kind == "" || version == "" {
				continue
			}
			c.seen[name] = true
			s := c.schema(def)
			delete(c.seen, name)
			apiVersion, file := version, strings.ToLower(kind)+"-"+version
			if group != "" {
				apiVersion = group + "/" + version
				file = strings.ToLower(kind) + "-" + strings.ToLower(strings.Split(group, ".")[0]) + "-" + version
			}
			if props, ok := s["properties"].(map[string]any); ok {
				props["apiVersion"] = map[string]any{"type": "string", "enum": []any{apiVersion}}
				props["kind"] = map[string]any{"type": "string", "enum": []any{kind}}
			}
			out, err := json.Marshal(s)
			if err != nil {
				return fmt.Errorf("definition %s: %w", name, err)
			}
			if err := os.WriteFile(filepath.Join(dir, file+".json"), out, 0o644); err != nil {
				return err
			}
			n++
		}
	}
	fmt.Printf("wrote %d schemas (strict, standalone) to %s\n", n, dir)
	return nil
}

// converter inlines definitions; seen holds those being inlined (cycles).
type converter struct {
	defs map[string]map[string]any
	seen map[string]bool
}

const refPrefix = "#/definitions/"

// schema returns the JSON schema of one OpenAPI schema object.
func (c *converter) schema(in map[string]any) map[string]any {
	if ref, ok := in["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, refPrefix)
		switch name {
		case "io.k8s.apimachinery.pkg.util.intstr.IntOrString":
			return map[string]any{"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}}
		case "io.k8s.apimachinery.pkg.api.resource.Quantity":
			return map[string]any{"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}}}
		}
		def, ok := c.defs[name]
		if !ok || c.seen[name] {
			return map[string]any{} // unknown or recursive (e.g. JSONSchemaProps): any value
		}
		c.seen[name] = true
		defer delete(c.seen, name)
		return c.schema(def)
	}
	out := make(map[string]any, len(in)+1)
	for k, v := range in {
		switch {
		case k == "description" || strings.HasPrefix(k, "x-"):
		case k == "properties":
			props := map[string]any{}
			for p, s := range v.(map[string]any) {
				props[p] = c.schema(s.(map[string]any))
			}
			out[k] = props
		case k == "items" || k == "additionalProperties":
			if s, ok := v.(map[string]any); ok {
				out[k] = c.schema(s)
			} else {
				out[k] = v
			}
		case k == "allOf" || k == "anyOf" || k == "oneOf":
			var list []any
			for _, s := range v.([]any) {
				list = append(list, c.schema(s.(map[string]any)))
			}
			out[k] = list
		case k == "type":
			if t, ok := v.(string); ok {
				out[k] = []any{t, "null"}
			} else {
				out[k] = v
			}
		default:
			out[k] = v
		}
	}
	if _, ok := out["properties"]; ok {
		if _, ok := out["additionalProperties"]; !ok {
			out["additionalProperties"] = false
		}
	}
	return out
}
