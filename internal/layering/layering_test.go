package layering

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path"
	"strings"
	"testing"
)

const module = "github.com/piccolo-serving/piccolo"

// layers is the order of doc.go, lowest first.
var layers = [][]string{
	{"api", "api/inference", "configs", "arrival", "backends/nvml", "internal/consultest", "tracing", "internal/tlsfiles"},
	{"dispatcher", "scheduler", "placement", "backends", "backends/membership", "loadgen", "internal/ocrtest"},
	{"backends/builtin", "backends/faults", "backends/fused", "backends/onnx", "backends/sim", "simulate", "profiler", "scheduler/control"},
	{"gateway", "evaluation", "scheduler/cluster"},
	{"metrics"},
	{"dataplane", "kserve"},
	{"controlplane"},
	{"status", "internal/demo", "internal/testharness", "gateway/gatewaytest", "kserve/kservetest", "internal/layering"},
	{"cmd/piccolo", "deploy"},
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
			lq := layerOf(q)
			if isAncestor(q, p) || (lq >= 0 && lq < lp) {
				continue
			}
			t.Errorf("%s (layer %d) imports %s (layer %d): imports must go to a lower layer (internal/layering/doc.go)", p, lp, q, lq)
		}
	}
	if n < 10 {
		t.Fatalf("go list listed %d packages; want the whole module", n)
	}
}

// TestLayeringCatchesAnUpwardImport checks the rule itself on the imports the
// layering forbids most: the dispatcher importing the gateway, the gateway
// importing its edge or its data plane.
func TestLayeringCatchesAnUpwardImport(t *testing.T) {
	for _, c := range [][2]string{{"dispatcher", "gateway"}, {"gateway", "kserve"}, {"gateway", "dataplane"},
		{"kserve", "dataplane"}, {"dataplane", "kserve"}, {"dataplane", "controlplane"}, {"metrics", "dataplane"}} {
		if lp, lq := layerOf(c[0]), layerOf(c[1]); lq < lp {
			t.Errorf("%s (layer %d) may import %s (layer %d); the layering must forbid it", c[0], lp, c[1], lq)
		}
	}
	if layerOf("backends/sim/x") != layerOf("backends/sim") || !isAncestor("backends", "backends/sim") {
		t.Error("an unlisted subpackage must take its parent's layer")
	}
}
