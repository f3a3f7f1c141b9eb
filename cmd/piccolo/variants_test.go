package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/piccolo-serving/piccolo/api"
	"github.com/piccolo-serving/piccolo/internal/ocrsamples"
	"github.com/piccolo-serving/piccolo/internal/ocrtest"
)

// ocrVariantsConfig is the OCR session with det and rec variants.
const ocrVariantsConfig = "../../configs/ocr-variants.yaml"

// TestOCRVariantsThroughGateway serves configs/ocr.yaml and
// configs/ocr-variants.yaml through a real gateway (the variant session
// without a target plans the most accurate ocr-det and ocr-rec), then
// measures the variant session on the hard set with `piccolo profile
// --accuracy` and writes the result into a copy of ocr.yaml's ocr-det
// profile: the accuracy must be the one the in-process measurement found
// (164/170 words, docs/variants.md), within 3 words, and the loaded copy must
// give it to the variant. Then the hard set at the session's rate for 20 s:
// ≥ 99% of the requests within the SLO.
func TestOCRVariantsThroughGateway(t *testing.T) {
	ocrtest.RequireModels(t)
	if testing.Short() {
		t.Skip("-short: reads 40 images through the OCR session")
	}
	tmp := t.TempDir()
	variants, err := os.ReadFile(ocrVariantsConfig)
	if err != nil {
		t.Fatal(err)
	}
	// The most accurate combination: no target.
	best := filepath.Join(tmp, "ocr-variants.yaml")
	if err := os.WriteFile(best, regexp.MustCompile(`(?m)^    accuracy: .*\n`).ReplaceAll(variants, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := api.Load(ocrConfig, best)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, addr, _ := startOCRGateway(t, ctx, ocrConfig, best)

	set := filepath.Join(tmp, "hard")
	if err := os.Mkdir(set, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := ocrsamples.WriteSet(set, ocrsamples.HardSamples()); err != nil {
		t.Fatal(err)
	}
	profiles := filepath.Join(tmp, "ocr.yaml")
	orig, err := os.ReadFile(ocrConfig)
	if err != nil {
		t.Fatal(err)
	}
	// The copy without ocr-det's accuracy, so that the command writes it.
	stripped := regexp.MustCompile(`(?m)^    accuracy: 0\.965 .*\n`).ReplaceAllString(string(orig), "")
	if stripped == string(orig) {
		t.Fatal("configs/ocr.yaml gives ocr-det no accuracy 0.965 to strip")
	}
	if err := os.WriteFile(profiles, []byte(stripped), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "profile", "--accuracy", set, "--target", addr, "--model", "ocr-variants",
		"--profile-file", profiles, "--variant", "ocr-det", "--hardware", "cpu-1t")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))
	m := regexp.MustCompile(`word accuracy (\d+)/(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no word accuracy in %q", out)
	}
	matched, _ := strconv.Atoi(m[1])
	words, _ := strconv.Atoi(m[2])
	if words != 170 || matched < 161 || matched > 167 {
		t.Errorf("read %d/%d words through the gateway; want 164 ± 3 of 170, as in process", matched, words)
	}
	got, err := api.Load(profiles, best)
	if err != nil {
		t.Fatal(err)
	}
	if a := got.ModelAccuracy("ocr-det"); math.Abs(a-float64(matched)/170) > 1e-4 {
		t.Errorf("ocr-det's profile accuracy %v after --profile-file; want %d/170", a, matched)
	}

	// The same measurement as the combination's joint accuracy, into the
	// session's joint_accuracy (replacing the entry the file has for it).
	out, err = run(t, "profile", "--accuracy", set, "--target", addr, "--model", "ocr-variants",
		"--profile-file", best, "--joint", "det=ocr-det,rec=ocr-rec")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	m = regexp.MustCompile(`word accuracy (\d+)/(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no word accuracy in %q", out)
	}
	joint, _ := strconv.Atoi(m[1])
	if got, err = api.Load(ocrConfig, best); err != nil {
		t.Fatal(err)
	}
	js, _ := got.Session("ocr-variants")
	n := 0
	for _, ja := range js.JointAccuracy {
		if ja.Variants["det"] == "ocr-det" && ja.Variants["rec"] == "ocr-rec" {
			n++
			if math.Abs(ja.Accuracy-float64(joint)/170) > 1e-4 {
				t.Errorf("joint accuracy of ocr-det + ocr-rec %v after --joint; want %d/170", ja.Accuracy, joint)
			}
		}
	}
	if n != 1 || len(js.JointAccuracy) != 6 {
		t.Errorf("after --joint: %d entries for ocr-det + ocr-rec among %d; want it replaced, one among 6", n, len(js.JointAccuracy))
	}

	// Under load: the hard set at the session's 2 images/s, open loop, through
	// the variants the plan chose.
	sess, _ := cfg.Session("ocr-variants")
	r := sendOCR(t, ctx, addr, sess.Name, sess.Modules[0].Rate, sess.SLO.D(), ocrsamples.HardSamples(), ocrVariantsSendFor)
	r.checkRefused(t)
	if acc := r.accuracy(); acc < 0.93 {
		t.Errorf("word accuracy under load %.1f%%; want about 96.5%%, as one image at a time", 100*acc)
	}
	if att := r.attainment(); att < 0.99 {
		t.Errorf("%.1f%% of requests within the SLO %v, want ≥ 99%%", 100*att, sess.SLO.D())
	}
}

// ocrVariantsSendFor is how long TestOCRVariantsThroughGateway sends load.
const ocrVariantsSendFor = 20 * time.Second
