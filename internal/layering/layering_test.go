package layering

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/piccolo-serving/piccolo"

// layers is the order of doc.go, lowest first.
var layers = [][]string{
	{"internal/registry"},
	{"api", "api/inference", "configs", "arrival", "backends/nvml", "internal/consultest", "tracing", "internal/tlsfiles"},
	{"dispatcher", "planner", "placement", "backends", "backends/membership", "loadgen", "metrics", "calibrate"},
	{"backends/builtin", "backends/faults", "backends/fused", "backends/onnx", "backends/sim", "simulate", "profiler", "scheduler/replan", "status", "tenants"},
	{"gateway", "serving", "scheduler/cluster", "internal/ocrtest", "internal/ocrsamples", "backends/process"},
	{"dataplane", "kserve", "evaluation"},
	{"controlplane"},
	{"gateway/process", "scheduler/process", "internal/demo", "internal/testharness", "gateway/gatewaytest", "kserve/kservetest", "internal/layering"},
	{"cmd/piccolo", "deploy"},
}

// testHelpers are the packages that exist for tests. Only tests and other
// helpers may import them: production code does not depend on test fixtures
// (issue 19: the profiler measured accuracy with internal/ocrtest's
// functions), and the binary does not link testing (TestBinaryLinksNoTesting;
// `piccolo demo` renders its OCR images with internal/ocrsamples).
var testHelpers = []string{"internal/consultest", "internal/ocrtest", "internal/testharness", "gateway/gatewaytest", "kserve/kservetest"}

// allowed reports whether package p may import q: q is of a lower layer or
// a parent directory of p, and a test helper only from another helper.
func allowed(p, q string) bool {
	lp, lq := layerOf(p), layerOf(q)
	if !isAncestor(q, p) && (lq < 0 || lq >= lp) {
		return false
	}
	return !slices.Contains(testHelpers, q) || slices.Contains(testHelpers, p)
}

// layerOf is p's layer, or that of its nearest listed parent directory; -1: none.
func layerOf(p string) int {
	for q := p; q != "." && q != "/"; q = path.Dir(q) {
		for i, l := range layers {
			for _, name := range l {
				if name == q {
					return i
				}
			}
		}
	}
	return -1
}

// isAncestor reports whether dir is a parent directory of p.
func isAncestor(dir, p string) bool { return strings.HasPrefix(p, dir+"/") }

func TestImportsGoDown(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	n := 0
	for dec.More() {
		var pkg struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&pkg); err != nil {
			t.Fatal(err)
		}
		n++
		p := strings.TrimPrefix(pkg.ImportPath, module+"/")
		lp := layerOf(p)
		if lp < 0 {
			t.Errorf("package %s is in no layer: add it to internal/layering (doc.go and layers) and docs/architecture.md", p)
			continue
		}
		for _, imp := range pkg.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			q := strings.TrimPrefix(imp, module+"/")
			if allowed(p, q) {
				continue
			}
			if slices.Contains(testHelpers, q) {
				t.Errorf("%s imports the test helper %s: only tests and test helpers may (internal/layering/doc.go)", p, q)
				continue
			}
			t.Errorf("%s (layer %d) imports %s (layer %d): imports must go to a lower layer (internal/layering/doc.go)", p, lp, q, layerOf(q))
		}
	}
	if n < 10 {
		t.Fatalf("go list listed %d packages; want the whole module", n)
	}
}

// TestLayeringCatchesAnUpwardImport checks the rule itself on the imports the
// layering forbids most: the dispatcher importing the gateway, the gateway
// importing its edge or its data plane, and the three issue 19 removed
// (metrics → gateway, status → controlplane, profiler → internal/ocrtest).
func TestLayeringCatchesAnUpwardImport(t *testing.T) {
	for _, c := range [][2]string{{"dispatcher", "gateway"}, {"gateway", "kserve"}, {"gateway", "dataplane"},
		{"kserve", "dataplane"}, {"dataplane", "kserve"}, {"dataplane", "controlplane"}, {"metrics", "dataplane"},
		{"metrics", "gateway"}, {"status", "controlplane"}, {"profiler", "internal/ocrtest"}, {"loadgen", "internal/consultest"},
		{"internal/demo", "internal/ocrtest"}, {"cmd/piccolo", "internal/testharness"}, {"controlplane", "gateway/process"}} {
		if allowed(c[0], c[1]) {
			t.Errorf("%s (layer %d) may import %s (layer %d); the layering must forbid it", c[0], layerOf(c[0]), c[1], layerOf(c[1]))
		}
	}
	for _, c := range [][2]string{{"gateway", "metrics"}, {"internal/demo", "internal/ocrsamples"}, {"backends/sim", "backends"}} {
		if !allowed(c[0], c[1]) {
			t.Errorf("%s may not import %s; the layering must allow it", c[0], c[1])
		}
	}
	if layerOf("backends/sim/x") != layerOf("backends/sim") || !isAncestor("backends", "backends/sim") {
		t.Error("an unlisted subpackage must take its parent's layer")
	}
}

// TestBinaryLinksNoTesting fails when the piccolo binary links the testing
// package: a production package that imports a test helper, or testing
// itself, would put the test flags and the test runtime into the binary
// (internal/demo did, through internal/ocrtest, until internal/ocrsamples).
func TestBinaryLinksNoTesting(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/cmd/piccolo")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 10 {
		t.Fatalf("go list listed %d packages; want cmd/piccolo's dependencies", len(lines))
	}
	for _, l := range lines {
		pkg, imports, _ := strings.Cut(l, " ")
		if slices.Contains(strings.Fields(imports), "testing") {
			t.Errorf("cmd/piccolo links testing: %s imports it", pkg)
		}
	}
}
