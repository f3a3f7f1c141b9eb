package api

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// wantErr is one expected *ConfigError: File (default "test.yaml"), Line and
// Field exactly, Msg as a substring.
type wantErr struct {
	line  int
	field string
	msg   string
	file  string
}

// configErrors unpacks what Load returns into its *ConfigError parts, failing
// the test on anything else.
func configErrors(t *testing.T, err error) []*ConfigError {
	t.Helper()
	if err == nil {
		return nil
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("error does not match ErrInvalidConfig: %v", err)
	}
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	out := make([]*ConfigError, 0, len(list))
	for _, e := range list {
		var ce *ConfigError
		if !errors.As(e, &ce) {
			t.Fatalf("error is not a *ConfigError: %T %v", e, e)
		}
		out = append(out, ce)
	}
	return out
}

func checkErrors(t *testing.T, err error, want []wantErr) {
	t.Helper()
	got := configErrors(t, err)
	if len(got) != len(want) {
		t.Errorf("got %d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i := 0; i < len(got) && i < len(want); i++ {
		g, w := got[i], want[i]
		switch w.file {
		case "":
			w.file = "test.yaml"
		case "-":
			w.file = "" // not tied to a file
		}
		if g.File != w.file || g.Line != w.line || g.Field != w.field || !strings.Contains(g.Msg, w.msg) {
			t.Errorf("error %d:\n got  %s\n want %s:%d: %s: ...%s...", i, g, w.file, w.line, w.field, w.msg)
		}
	}
}

// base is a valid second document appended to every case: hardware "unit" and
// profiles of models m1 (fastest 10ms) and m2 (30ms).
const base = `
---
hardware:
  - {name: unit, price: 1}
profiles:
  - model: m1
    hardware: unit
    entries: [{batch: 1, duration: 10ms}, {batch: 4, duration: 20ms}]
  - model: m2
    hardware: unit
    entries: [{batch: 1, duration: 30ms}]
`

func TestLoadBytesErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []wantErr
	}{
		// hardware
		{"hardware ok", "hardware:\n  - {name: v100, price: 3.06}\n", nil},
		{"hardware empty name", "hardware:\n  - {name: \"\", price: 1}\n",
			[]wantErr{{2, "hardware[0].name", "must not be empty", ""}}},
		{"hardware missing name", "hardware:\n  - {price: 1}\n",
			[]wantErr{{2, "hardware[0].name", "missing: want a hardware type name", ""}}},
		{"hardware zero price", "hardware:\n  - name: v100\n    price: 0\n",
			[]wantErr{{3, "hardware[v100].price", "must be a positive finite number (cost units per machine-hour), got 0", ""}}},
		{"hardware negative price", "hardware:\n  - {name: v100, price: -2}\n",
			[]wantErr{{2, "hardware[v100].price", "got -2", ""}}},
		{"hardware infinite price", "hardware:\n  - {name: v100, price: .inf}\n",
			[]wantErr{{2, "hardware[v100].price", "positive finite", ""}}},
		{"hardware link ok", "hardware:\n  - {name: v100, price: 1, link_latency: 1ms, link_mbps: 100}\n", nil},
		{"hardware negative link latency", "hardware:\n  - {name: v100, price: 1, link_latency: -1ms}\n",
			[]wantErr{{2, "hardware[v100].link_latency", "must be from 0 to 10s", ""}}},
		{"hardware negative link bandwidth", "hardware:\n  - {name: v100, price: 1, link_mbps: -5}\n",
			[]wantErr{{2, "hardware[v100].link_mbps", "finite number of Mbit/s ≥ 0", ""}}},
		{"hardware link bandwidth a word", "hardware:\n  - {name: v100, price: 1, link_mbps: fast}\n",
			[]wantErr{{2, "hardware[v100].link_mbps", "a bandwidth in Mbit/s", ""}}},
		{"hardware NaN price", "hardware:\n  - {name: v100, price: .nan}\n",
			[]wantErr{{2, "hardware[v100].price", "positive finite", ""}}},
		{"hardware price not a number", "hardware:\n  - {name: v100, price: cheap}\n",
			[]wantErr{{2, "hardware[v100].price", `want a price in cost units per machine-hour such as 3.06; got "cheap"`, ""}}},
		{"hardware quoted price", "hardware:\n  - {name: v100, price: \"3\"}\n",
			[]wantErr{{2, "hardware[v100].price", `got "3"`, ""}}},
		{"hardware duplicate", "hardware:\n  - {name: v100, price: 1}\n  - {name: v100, price: 2}\n",
			[]wantErr{{3, "hardware[v100].name", "hardware v100 defined at test.yaml:2 and test.yaml:3", ""}}},
		{"hardware duplicate of base", "hardware:\n  - {name: unit, price: 1}\n",
			[]wantErr{{6, "hardware[unit].name", "hardware unit defined at test.yaml:2 and test.yaml:6", ""}}},
		{"hardware unknown key", "hardware:\n  - name: v100\n    price: 1\n    cost: 2\n",
			[]wantErr{{4, "hardware[v100]", `unknown key "cost": allowed keys are name, price`, ""}}},
		{"hardware misspelt key", "hardware:\n  - {name: v100, prise: 1}\n", []wantErr{
			{2, "hardware[v100]", `unknown key "prise" (did you mean price?)`, ""},
			{2, "hardware[v100].price", "missing", ""}}},
		{"hardware repeated key", "hardware:\n  - name: v100\n    price: 1\n    price: 2\n",
			[]wantErr{{4, "hardware[v100]", `key "price" repeated (first at line 3)`, ""}}},
		{"hardware not a list", "hardware: {name: v100, price: 1}\n",
			[]wantErr{{1, "hardware", "want a list of hardware types", ""}}},
		{"hardware item not a mapping", "hardware: [v100]\n",
			[]wantErr{{1, "hardware[0]", `want a hardware type such as {name: v100, price: 3.06}; got "v100"`, ""}}},
		{"hardware name a list", "hardware:\n  - {name: [a], price: 1}\n",
			[]wantErr{{2, "hardware[0].name", "want a name; got a list", ""}}},

		// profiles
		{"profile ok", "profiles:\n  - {model: x, hardware: unit, entries: [{batch: 2, concurrency: 2, duration: 5ms}]}\n", nil},
		{"profile missing model", "profiles:\n  - hardware: unit\n    entries: [{batch: 1, duration: 5ms}]\n",
			[]wantErr{{2, "profiles[0].model", "missing: want a model name", ""}}},
		{"profile unknown hardware", "profiles:\n  - model: x\n    hardware: k80\n    entries: [{batch: 1, duration: 5ms}]\n",
			[]wantErr{{3, "profiles[x/k80].hardware", `hardware "k80" is not defined; defined hardware: unit`, ""}}},
		{"profile empty hardware", "profiles:\n  - {model: x, hardware: \"\", entries: [{batch: 1, duration: 5ms}]}\n",
			[]wantErr{{2, "profiles[0].hardware", "must not be empty", ""}}},
		{"profile duplicate", "profiles:\n  - {model: x, hardware: unit, entries: [{batch: 1, duration: 5ms}]}\n  - {model: x, hardware: unit, entries: [{batch: 2, duration: 5ms}]}\n",
			[]wantErr{{3, "profiles[x/unit]", "profile of model x on hardware unit defined at test.yaml:2 and test.yaml:3", ""}}},
		{"profile no entries", "profiles:\n  - {model: x, hardware: unit, entries: []}\n",
			[]wantErr{{2, "profiles[x/unit].entries", "must list at least one entry", ""}}},
		{"profile entries missing", "profiles:\n  - {model: x, hardware: unit}\n",
			[]wantErr{{2, "profiles[x/unit].entries", "missing: want a list of entries", ""}}},
		{"entry batch zero", "profiles:\n  - model: x\n    hardware: unit\n    entries:\n      - {batch: 0, duration: 5ms}\n",
			[]wantErr{{5, "profiles[x/unit].entries[0].batch", "must be a whole number from 1 to 1000000, got 0", ""}}},
		{"entry batch fractional", "profiles:\n  - model: x\n    hardware: unit\n    entries:\n      - {batch: 1.5, duration: 5ms}\n",
			[]wantErr{{5, "profiles[x/unit].entries[0].batch", `want a batch size (whole number ≥ 1) such as 8; got "1.5"`, ""}}},
		{"entry batch missing", "profiles:\n  - model: x\n    hardware: unit\n    entries:\n      - {duration: 5ms}\n",
			[]wantErr{{5, "profiles[x/unit].entries[0].batch", "missing", ""}}},
		{"entry negative concurrency", "profiles:\n  - model: x\n    hardware: unit\n    entries:\n      - {batch: 1, concurrency: -1, duration: 5ms}\n",
			[]wantErr{{5, "profiles[x/unit].entries[0].concurrency", "(0 or missing means 1), got -1", ""}}},
		{"entry zero duration", "profiles:\n  - model: x\n    hardware: unit\n    entries:\n      - batch: 1\n        duration: 0s\n",
			[]wantErr{{6, "profiles[x/unit].entries[0].duration", "must be a positive duration such as 18ms, got 0s", ""}}},
		{"entry negative duration", "profiles:\n  - model: x\n    hardware: unit\n    entries:\n      - {batch: 1, duration: -5ms}\n",
			[]wantErr{{5, "profiles[x/unit].entries[0].duration", "got -5ms", ""}}},
		{"entry bare number duration", "profiles:\n  - model: x\n    hardware: unit\n    entries:\n      - batch: 1\n        duration: 40\n",
			[]wantErr{{6, "profiles[x/unit].entries[0].duration", `"40" is not a duration: want a number with a unit`, ""}}},
		{"entry duplicate batch and concurrency", "profiles:\n  - model: x\n    hardware: unit\n    entries:\n      - {batch: 2, duration: 5ms}\n      - {batch: 2, concurrency: 1, duration: 6ms}\n      - {batch: 2, concurrency: 2, duration: 7ms}\n",
			[]wantErr{{6, "profiles[x/unit].entries[1]", "batch 2 with concurrency 1 is listed twice (entries[0] at test.yaml:5)", ""}}},
		{"entry unknown key", "profiles:\n  - model: x\n    hardware: unit\n    entries:\n      - {batch: 1, duration: 5ms, latency: 5ms}\n",
			[]wantErr{{5, "profiles[x/unit].entries[0]", `unknown key "latency": allowed keys are batch, concurrency, duration`, ""}}},

		// sessions
		{"session ok", "sessions:\n  - name: s\n    slo: 100ms\n    modules:\n      - {name: a, model: m1, rate: 10}\n      - {name: b, model: m2, after: [a]}\n", nil},
		// anyof and race (Cloudflow): m1 10 ms, m2 30 ms; an slo of 25ms fits
		// src → {a | b} → j only because anyof takes the faster branch.
		{"anyof ok", "sessions:\n  - name: s\n    slo: 25ms\n    modules:\n      - {name: a, model: m1}\n      - {name: b, model: m2}\n      - {name: j, model: m1, after: [b, a], join: anyof, race: 2}\n", nil},
		{"allof slo", "sessions:\n  - name: s\n    slo: 25ms\n    modules:\n      - {name: a, model: m1}\n      - {name: b, model: m2}\n      - {name: j, model: m1, after: [b, a], join: allof}\n",
			[]wantErr{{3, "sessions[s].slo", "slo 25ms is below the fastest possible latency 40ms (path b -> j)", ""}}},
		{"join unknown", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1}\n      - {name: b, model: m1}\n      - {name: j, model: m1, after: [a, b], join: first}\n",
			[]wantErr{{7, "sessions[s].modules[j].join", `"first" is not a join; allowed: allof (the default: run once every parent has finished) or anyof`, ""}}},
		{"anyof one parent", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1}\n      - {name: j, model: m1, after: [a], join: anyof}\n",
			[]wantErr{{6, "sessions[s].modules[j].join", "anyof races the modules in after, so module j needs at least two of them; it has 1", ""}}},
		{"anyof shared parent", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1}\n      - {name: b, model: m1}\n      - {name: j, model: m1, after: [a, b], join: anyof}\n      - {name: k, model: m1, after: [b]}\n",
			[]wantErr{{7, "sessions[s].modules[j].join", "module j races its parents (anyof), so each must feed it alone, but b also feeds k", ""}}},
		{"race too many", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, race: 9}\n",
			[]wantErr{{5, "sessions[s].modules[a].race", "must be the number of machines each batch runs on at once, 1 ≤ race ≤ 8 (1 or none: no race), or auto (the planner chooses from the module's tail); got 9", ""}}},
		{"race not a number", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, race: two}\n",
			[]wantErr{{5, "sessions[s].modules[a].race", `want a number of machines (whole number ≥ 1) such as 2, or auto (the planner chooses from the module's tail); got "two"`, ""}}},
		{"race negative", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, race: -1}\n",
			[]wantErr{{5, "sessions[s].modules[a].race", "want a number of machines (whole number ≥ 1) such as 2, or auto (the planner chooses from the module's tail); got -1", ""}}},
		{"race auto", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, race: auto}\n", nil},
		// tail: a share of the batches take factor × their profiled duration.
		{"tail ok", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, race: auto, tail: {share: 0.1, factor: 8}}\n", nil},
		{"tail without race", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, tail: {share: 0, factor: 1}}\n", nil},
		{"tail share too large", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, tail: {share: 0.6, factor: 8}}\n",
			[]wantErr{{5, "sessions[s].modules[a].tail.share", "must be the share of module a's batches that are slow, 0 ≤ share ≤ 0.5; got 0.6", ""}}},
		{"tail share negative and factor below one", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, tail: {share: -0.1, factor: 0.5}}\n",
			[]wantErr{
				{5, "sessions[s].modules[a].tail.share", "0 ≤ share ≤ 0.5; got -0.1", ""},
				{5, "sessions[s].modules[a].tail.factor", "must be how many times its profiled duration a slow batch of module a takes, 1 ≤ factor ≤ 100; got 0.5", ""},
			}},
		{"tail factor too large", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, tail: {share: 0.1, factor: 101}}\n",
			[]wantErr{{5, "sessions[s].modules[a].tail.factor", "1 ≤ factor ≤ 100; got 101", ""}}},
		{"tail factor missing", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, tail: {share: 0.1}}\n",
			[]wantErr{{5, "sessions[s].modules[a].tail", "factor missing: give both share and factor, such as {share: 0.1, factor: 8}", ""}}},
		{"tail share missing", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, tail: {factor: 8}}\n",
			[]wantErr{{5, "sessions[s].modules[a].tail", "share missing: give both share and factor, such as {share: 0.1, factor: 8}", ""}}},
		{"tail empty", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, tail: {}}\n",
			[]wantErr{{5, "sessions[s].modules[a].tail", "want a measured tail such as {share: 0.1, factor: 8}", ""}}},
		{"tail a number", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, tail: 0.1}\n",
			[]wantErr{{5, "sessions[s].modules[a].tail", `want a measured tail such as {share: 0.1, factor: 8} (share of the batches take factor × their profiled duration); got "0.1"`, ""}}},
		{"tail unknown key", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, tail: {share: 0.1, factor: 8, p99: 3}}\n",
			[]wantErr{{5, "sessions[s].modules[a].tail", `unknown key "p99"`, ""}}},
		{"tail share not a number", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, tail: {share: ten, factor: 8}}\n",
			[]wantErr{{5, "sessions[s].modules[a].tail", `share: want a share of the batches from 0 to 0.5 such as 0.1; got "ten"`, ""}}},
		{"tail key repeated", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, tail: {share: 0.1, factor: 8, share: 0.2}}\n",
			[]wantErr{{5, "sessions[s].modules[a].tail", "key share repeated", ""}}},
		// fanout (Llama's input-dependent flow): a detector at 10 req/s finding
		// 0 to 3 objects, each as often (mean 1.5), feeds rec at 15 items/s.
		{"fanout ok", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: det, model: m1, rate: 10}\n      - {name: rec, model: m1, rate: 15, after: [det], fanout: {0: 1, 1: 1, 2: 1, 3: 1}}\n", nil},
		{"fanout mean below one", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: det, model: m1, rate: 10}\n      - {name: rec, model: m1, rate: 5, after: [det], fanout: {0: 1, 1: 1}}\n", nil},
		{"fanout rate disagrees", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: det, model: m1, rate: 10}\n      - {name: rec, model: m1, rate: 40, after: [det], fanout: {0: 1, 1: 1, 2: 1, 3: 1}}\n",
			[]wantErr{{6, "sessions[s].modules[rec].fanout", "averages 1.5 items per item of det, so at det's rate of 10 req/s module rec runs 15 items/s, but its rate is 40: set rate: 15", ""}}},
		{"fanout two parents", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, rate: 10}\n      - {name: b, model: m1, rate: 10}\n      - {name: rec, model: m1, rate: 10, after: [a, b], fanout: {1: 1}}\n",
			[]wantErr{{7, "sessions[s].modules[rec].fanout", "module rec fans out per item of its parent, so it needs exactly one module in after; it has 2", ""}}},
		{"fanout negative weight", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: det, model: m1, rate: 10}\n      - {name: rec, model: m1, rate: 10, after: [det], fanout: {1: 2, 3: -1}}\n",
			[]wantErr{{6, "sessions[s].modules[rec].fanout", "every key a whole number from 0 to 1000 listed once, every weight finite and ≥ 0", ""}}},
		{"fanout too many items", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: det, model: m1, rate: 10}\n      - {name: rec, model: m1, rate: 10, after: [det], fanout: {1001: 1}}\n",
			[]wantErr{{6, "sessions[s].modules[rec].fanout", "from 0 to 1000", ""}}},
		{"fanout a list", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: det, model: m1, rate: 10}\n      - {name: rec, model: m1, rate: 10, after: [det], fanout: [1, 2]}\n",
			[]wantErr{{6, "sessions[s].modules[rec].fanout", "want a mapping from items per parent item to a weight", ""}}},
		{"fanout key not a number", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: det, model: m1, rate: 10}\n      - {name: rec, model: m1, rate: 10, after: [det], fanout: {one: 1}}\n",
			[]wantErr{{6, "sessions[s].modules[rec].fanout", `key "one"`, ""}}},
		{"session empty name", "sessions:\n  - {name: \"\", slo: 1s, modules: [{name: a, model: m1}]}\n",
			[]wantErr{{2, "sessions[0].name", "must not be empty", ""}}},
		{"session name with slash", "sessions:\n  - {name: a/b, slo: 1s, modules: [{name: a, model: m1}]}\n",
			[]wantErr{{2, "sessions[a/b].name", `"a/b" is not allowed: a session is exposed as a model name in URLs, so use only letters, digits, '-', '_' and '.'`, ""}}},
		{"session name dot dot", "sessions:\n  - {name: .., slo: 1s, modules: [{name: a, model: m1}]}\n",
			[]wantErr{{2, `sessions[".."].name`, "is not allowed", ""}}},
		{"session name with space", "sessions:\n  - {name: my app, slo: 1s, modules: [{name: a, model: m1}]}\n",
			[]wantErr{{2, `sessions["my app"].name`, "is not allowed", ""}}},
		{"session name allowed characters", "sessions:\n  - {name: Traffic-cam_2.v1, slo: 1s, modules: [{name: a, model: m1}]}\n", nil},
		{"session duplicate", "sessions:\n  - {name: s, slo: 1s, modules: [{name: a, model: m1}]}\n  - {name: s, slo: 1s, modules: [{name: a, model: m1}]}\n",
			[]wantErr{{3, "sessions[s].name", "session s defined at test.yaml:2 and test.yaml:3", ""}}},
		{"session zero slo", "sessions:\n  - {name: s, slo: 0s, modules: [{name: a, model: m1}]}\n",
			[]wantErr{{2, "sessions[s].slo", "must be a positive duration such as 400ms, got 0s", ""}}},
		{"session bare number slo", "sessions:\n  - name: s\n    slo: 400\n    modules: [{name: a, model: m1}]\n",
			[]wantErr{{3, "sessions[s].slo", `"400" is not a duration: want a number with a unit, such as 250ms or 2s`, ""}}},
		{"session slo a list", "sessions:\n  - name: s\n    slo: [1s]\n    modules: [{name: a, model: m1}]\n",
			[]wantErr{{3, "sessions[s].slo", "want a duration such as 250ms or 2s", ""}}},
		{"session slo missing", "sessions:\n  - name: s\n    modules: [{name: a, model: m1}]\n",
			[]wantErr{{2, "sessions[s].slo", "missing: want an end-to-end latency objective such as 400ms", ""}}},
		{"session no modules", "sessions:\n  - {name: s, slo: 1s, modules: []}\n",
			[]wantErr{{2, "sessions[s].modules", "must list at least one module", ""}}},
		{"session modules missing", "sessions:\n  - {name: s, slo: 1s}\n",
			[]wantErr{{2, "sessions[s].modules", "missing: want a list of modules", ""}}},
		{"session modules not a list", "sessions:\n  - name: s\n    slo: 1s\n    modules: {name: a, model: m1}\n",
			[]wantErr{{4, "sessions[s].modules", "want a list of modules such as [{name: detect, model: ssd, rate: 100}]; got a mapping", ""}}},
		{"session unknown key", "sessions:\n  - {name: s, slo: 1s, deadline: 2s, modules: [{name: a, model: m1}]}\n",
			[]wantErr{{2, "sessions[s]", `unknown key "deadline": allowed keys are name, slo, accuracy, modules`, ""}}},
		{"module duplicate name", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1}\n      - {name: a, model: m2}\n",
			[]wantErr{{6, "sessions[s].modules[a].name", "module a defined at test.yaml:5 and test.yaml:6: module names must be unique within a session", ""}}},
		{"module same name in two sessions", "sessions:\n  - {name: s, slo: 1s, modules: [{name: a, model: m1}]}\n  - {name: t, slo: 1s, modules: [{name: a, model: m1}]}\n", nil},
		{"module empty name", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: \"\", model: m1}\n",
			[]wantErr{{5, "sessions[s].modules[0].name", "must not be empty", ""}}},
		{"module missing model", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a}\n",
			[]wantErr{{5, "sessions[s].modules[a].model", "missing: want a model name", ""}}},
		{"module model without profile", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        model: yolo\n",
			[]wantErr{{6, "sessions[s].modules[a].model", `model "yolo" has no profile: add one under profiles (profiled models: m1, m2)`, ""}}},
		{"module negative rate", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: car, model: m1, rate: -1}\n",
			[]wantErr{{5, "sessions[s].modules[car].rate", "must be a finite number ≥ 0 (req/s), got -1", ""}}},
		{"module infinite rate", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: car, model: m1, rate: .inf}\n",
			[]wantErr{{5, "sessions[s].modules[car].rate", "got +Inf", ""}}},
		{"module rate not a number", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: car, model: m1, rate: fast}\n",
			[]wantErr{{5, "sessions[s].modules[car].rate", `want a request rate in req/s such as 60; got "fast"`, ""}}},
		{"module zero rate", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: car, model: m1, rate: 0}\n", nil},
		{"module unknown key", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: car, model: m1, rates: 5}\n",
			[]wantErr{{5, "sessions[s].modules[car]", `unknown key "rates" (did you mean rate?): allowed keys are name, model, variants, rate, after`, ""}}},

		// variants and accuracy
		{"variants ok", "sessions:\n  - name: s\n    slo: 1s\n    accuracy: 0.9\n    modules:\n      - name: a\n        variants:\n          - {model: m1, accuracy: 0.99}\n          - {model: m2, accuracy: 0.9}\n", nil},
		{"variants and model", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        model: m1\n        variants: [{model: m2, accuracy: 0.9}]\n",
			[]wantErr{{7, "sessions[s].modules[a].variants", "module a gives both model and variants: give model (one model) or variants (several, the planner picks one), not both", ""}}},
		{"variant without profile", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        variants:\n          - {model: m1, accuracy: 0.99}\n          - {model: tiny, accuracy: 0.8}\n",
			[]wantErr{{8, "sessions[s].modules[a].variants[1].model", `variant "tiny" has no profile on any hardware: add one under profiles (profiled models: m1, m2)`, ""}}},
		{"variant accuracy out of range", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        variants:\n          - {model: m1, accuracy: 99}\n",
			[]wantErr{{7, "sessions[s].modules[a].variants[0].accuracy", "must be from 0 to 1 (the share of right outputs), got 99", ""}}},
		{"variant accuracy missing", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        variants:\n          - {model: m1}\n",
			[]wantErr{{7, "sessions[s].modules[a].variants[0].accuracy", "missing: give the variant's accuracy from 0 to 1 such as 0.95, or measure it into its profile with piccolo profile --accuracy", ""}}},
		{"variant duplicate", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        variants:\n          - {model: m1, accuracy: 0.9}\n          - {model: m1, accuracy: 0.8}\n",
			[]wantErr{{8, "sessions[s].modules[a].variants[1].model", "variant m1 is listed twice (variants[0] at test.yaml:7): list each model once", ""}}},
		{"variant unknown key", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        variants:\n          - {model: m1, acc: 0.9}\n",
			[]wantErr{
				{7, "sessions[s].modules[a].variants[0]", `unknown key "acc": allowed keys are model, accuracy`, ""},
				{7, "sessions[s].modules[a].variants[0].accuracy", "missing", ""}}},
		{"variants not a list", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, variants: m1}\n",
			[]wantErr{{5, "sessions[s].modules[a].variants", `want a list of variants such as [{model: resnet50, accuracy: 0.76}, {model: resnet18, accuracy: 0.70}]; got "m1"`, ""}}},
		{"session accuracy out of range", "sessions:\n  - {name: s, slo: 1s, accuracy: 1.5, modules: [{name: a, model: m1}]}\n",
			[]wantErr{{2, "sessions[s].accuracy", "must be an accuracy target from 0 to 1 such as 0.95 (leave it out for the most accurate variants), got 1.5", ""}}},
		{"session accuracy not a number", "sessions:\n  - {name: s, slo: 1s, accuracy: high, modules: [{name: a, model: m1}]}\n",
			[]wantErr{{2, "sessions[s].accuracy", `want an end-to-end accuracy target from 0 to 1 such as 0.95; got "high"`, ""}}},
		// joint accuracy of variant combinations
		{"joint ok", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        variants: [{model: m1, accuracy: 0.99}, {model: m2, accuracy: 0.9}]\n      - {name: b, model: m1, after: [a]}\n    joint_accuracy:\n      - {variants: {a: m2}, accuracy: 0.85}\n", nil},
		{"joint names a module without variants", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        variants: [{model: m1, accuracy: 0.99}, {model: m2, accuracy: 0.9}]\n      - {name: b, model: m1, after: [a]}\n    joint_accuracy:\n      - {variants: {a: m2, b: m1}, accuracy: 0.85}\n",
			[]wantErr{{9, "sessions[s].joint_accuracy[0].variants.b", `module "b" is not a module of session s with variants: name each of a`, ""}}},
		{"joint names no variant of the module", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        variants: [{model: m1, accuracy: 0.99}, {model: m2, accuracy: 0.9}]\n      - {name: b, model: m1, after: [a]}\n    joint_accuracy:\n      - {variants: {a: m3}, accuracy: 0.85}\n",
			[]wantErr{{9, "sessions[s].joint_accuracy[0].variants.a", `"m3" is not a variant of module a: its variants are m1, m2`, ""}}},
		{"joint misses a module", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        variants: [{model: m1, accuracy: 0.99}, {model: m2, accuracy: 0.9}]\n      - {name: b, model: m1, after: [a]}\n    joint_accuracy:\n      - {variants: {}, accuracy: 0.85}\n",
			[]wantErr{{9, "sessions[s].joint_accuracy[0].variants", "module a is missing: a combination names the variant of every module with variants (a)", ""}}},
		{"joint accuracy out of range", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        variants: [{model: m1, accuracy: 0.99}, {model: m2, accuracy: 0.9}]\n      - {name: b, model: m1, after: [a]}\n    joint_accuracy:\n      - {variants: {a: m1}, accuracy: 1.2}\n",
			[]wantErr{{9, "sessions[s].joint_accuracy[0].accuracy", "must be from 0 to 1 (the share of right outputs of the whole session), got 1.2", ""}}},
		{"joint accuracy missing", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        variants: [{model: m1, accuracy: 0.99}, {model: m2, accuracy: 0.9}]\n      - {name: b, model: m1, after: [a]}\n    joint_accuracy:\n      - {variants: {a: m1}}\n",
			[]wantErr{{9, "sessions[s].joint_accuracy[0].accuracy", "missing: want an accuracy from 0 to 1 such as 0.95", ""}}},
		{"joint listed twice", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        variants: [{model: m1, accuracy: 0.99}, {model: m2, accuracy: 0.9}]\n      - {name: b, model: m1, after: [a]}\n    joint_accuracy:\n      - {variants: {a: m1}, accuracy: 0.9}\n      - {variants: {a: m1}, accuracy: 0.8}\n",
			[]wantErr{{10, "sessions[s].joint_accuracy[1].variants", "combination listed twice (joint_accuracy[0] at test.yaml:9): list each once", ""}}},
		{"joint variants not a map", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - name: a\n        variants: [{model: m1, accuracy: 0.99}, {model: m2, accuracy: 0.9}]\n      - {name: b, model: m1, after: [a]}\n    joint_accuracy:\n      - {variants: [a, m1], accuracy: 0.9}\n",
			[]wantErr{{9, "sessions[s].joint_accuracy[0].variants", "want a map from each module with variants to the variant run, such as {det: det-small, rec: rec-small}; got a list", ""}}},
		{"joint in a session without variants", "sessions:\n  - {name: s, slo: 1s, modules: [{name: a, model: m1}], joint_accuracy: [{variants: {a: m1}, accuracy: 0.9}]}\n",
			[]wantErr{{2, "sessions[s].joint_accuracy[0].variants", "session s has no module with variants: joint accuracies are for variant combinations", ""}}},
		{"profile accuracy out of range", "profiles:\n  - {model: x, hardware: unit, accuracy: -0.1, entries: [{batch: 1, duration: 5ms}]}\n",
			[]wantErr{{2, "profiles[x/unit].accuracy", "must be from 0 to 1 (the share of right outputs on the labelled set), got -0.1", ""}}},
		{"profile negative input bytes", "profiles:\n  - {model: x, hardware: unit, input_bytes: -1, entries: [{batch: 1, duration: 5ms}]}\n",
			[]wantErr{{2, "profiles[x/unit].input_bytes", "must be a whole number of bytes from 0 to 1099511627776, got -1", ""}}},
		{"profile output bytes a fraction", "profiles:\n  - {model: x, hardware: unit, output_bytes: 1.5, entries: [{batch: 1, duration: 5ms}]}\n",
			[]wantErr{{2, "profiles[x/unit].output_bytes", "the bytes one item receives", ""}}},
		{"after unknown module", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1}\n      - name: b\n        model: m1\n        after:\n          - a\n          - nope\n",
			[]wantErr{{10, "sessions[s].modules[b].after[1]", `"nope" is not a module of session s; its modules are a, b`, ""}}},
		{"after self", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, after: [a]}\n",
			[]wantErr{{5, "sessions[s].modules[a].after[0]", "module a cannot run after itself", ""}}},
		{"after duplicate", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1}\n      - {name: b, model: m1, after: [a, a]}\n",
			[]wantErr{{6, "sessions[s].modules[b].after[1]", `"a" is listed twice`, ""}}},
		{"after not a list", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1}\n      - {name: b, model: m1, after: a}\n",
			[]wantErr{{6, "sessions[s].modules[b].after", `want a list of module names such as [detect]; got "a"`, ""}}},
		{"cycle", "sessions:\n  - name: s\n    slo: 1s\n    modules:\n      - {name: a, model: m1, after: [c]}\n      - {name: b, model: m1, after: [a]}\n      - {name: c, model: m1, after: [b]}\n      - {name: d, model: m1}\n",
			[]wantErr{{4, "sessions[s].modules", "modules form a cycle: a -> b -> c -> a", ""}}},
		{"slo below fastest latency", "sessions:\n  - name: traffic\n    slo: 35ms\n    modules:\n      - {name: detect, model: m1}\n      - {name: car, model: m2, after: [detect]}\n      - {name: plate, model: m1, after: [detect]}\n      - {name: out, model: m1, after: [plate, car]}\n",
			[]wantErr{{3, "sessions[traffic].slo", "slo 35ms is below the fastest possible latency 50ms (path detect -> car -> out)", ""}}},
		{"slo equal to fastest latency", "sessions:\n  - name: traffic\n    slo: 50ms\n    modules:\n      - {name: detect, model: m1}\n      - {name: car, model: m2, after: [detect]}\n      - {name: plate, model: m1, after: [detect]}\n      - {name: out, model: m1, after: [plate, car]}\n", nil},
		{"slo below one module", "sessions:\n  - {name: s, slo: 5ms, modules: [{name: a, model: m2}]}\n",
			[]wantErr{{2, "sessions[s].slo", "slo 5ms is below the fastest possible latency 30ms (path a)", ""}}},

		// backends
		{"backend ok", "backends:\n  - {id: gpu-0, address: 127.0.0.1:9101, hardware: unit}\n  - {id: gpu-1, address: \"[::1]:9102\", hardware: unit}\n", nil},
		{"backend empty id", "backends:\n  - {id: \"\", address: 127.0.0.1:9101, hardware: unit}\n",
			[]wantErr{{2, "backends[0].id", "must not be empty", ""}}},
		{"backend duplicate id", "backends:\n  - {id: g, address: 127.0.0.1:9101, hardware: unit}\n  - {id: g, address: 127.0.0.1:9102, hardware: unit}\n",
			[]wantErr{{3, "backends[g].id", "backend g defined at test.yaml:2 and test.yaml:3", ""}}},
		{"backend address without port", "backends:\n  - {id: g, address: localhost, hardware: unit}\n",
			[]wantErr{{2, "backends[g].address", `"localhost" is not host:port: want host:port such as 127.0.0.1:9101`, ""}}},
		{"backend address without host", "backends:\n  - {id: g, address: \":9101\", hardware: unit}\n",
			[]wantErr{{2, "backends[g].address", "is not host:port", ""}}},
		{"backend named port", "backends:\n  - {id: g, address: \"localhost:http\", hardware: unit}\n",
			[]wantErr{{2, "backends[g].address", `port "http" must be a number from 1 to 65535`, ""}}},
		{"backend port out of range", "backends:\n  - {id: g, address: \"localhost:70000\", hardware: unit}\n",
			[]wantErr{{2, "backends[g].address", `port "70000"`, ""}}},
		{"backend unknown hardware", "backends:\n  - id: g\n    address: 127.0.0.1:9101\n    hardware: k80\n",
			[]wantErr{{4, "backends[g].hardware", `hardware "k80" is not defined; defined hardware: unit`, ""}}},
		{"backend missing fields", "backends:\n  - {id: g}\n", []wantErr{
			{2, "backends[g].address", "missing: want a host:port address", ""},
			{2, "backends[g].hardware", "missing: want a hardware type name", ""}}},

		// membership
		{"membership static", "membership: static\n", nil},
		{"membership consul", "membership: consul\n", nil},
		{"membership empty", "membership: \"\"\n", nil},
		{"membership unknown", "membership: zookeeper\n",
			[]wantErr{{1, "membership", `"zookeeper" is not a membership: want static`, ""}}},
		{"membership a list", "membership: [consul]\n",
			[]wantErr{{1, "membership", "want static or consul; got a list", ""}}},
		{"membership set twice", "membership: consul\n---\nmembership: static\n",
			[]wantErr{{3, "membership", `set to "consul" at test.yaml:1 and to "static" at test.yaml:3: set it once`, ""}}},
		{"membership repeated same", "membership: consul\n---\nmembership: consul\n", nil},

		// document shape
		{"unknown top-level key", "sesions: []\n",
			[]wantErr{{1, "", `unknown key "sesions" (did you mean sessions?): allowed keys are hardware, profiles, sessions, backends, membership`, ""}}},
		{"top level a list", "- hardware\n",
			[]wantErr{{1, "", "want a mapping with the keys hardware, profiles, sessions, backends, membership; got a list", ""}}},
		{"repeated top-level key", "hardware: []\nhardware: []\n",
			[]wantErr{{2, "", `key "hardware" repeated (first at line 1)`, ""}}},
		{"merge key", "hardware:\n  - &v {name: v100, price: 1}\n  - {<<: *v, name: t4}\n", []wantErr{
			{3, "hardware[t4]", "merge keys (<<) are not supported", ""},
			{3, "hardware[t4].price", "missing", ""}}},
		{"aliases", "hardware:\n  - &v {name: v100, price: 1}\nprofiles:\n  - {model: x, hardware: v100, entries: &e [{batch: 1, duration: 5ms}]}\n  - {model: y, hardware: v100, entries: *e}\n", nil},
		{"syntax error", "hardware: [\n",
			[]wantErr{{2, "", "YAML syntax error: did not find expected node content", ""}}},
		{"tab indentation", "hardware:\n\t- {name: v100, price: 1}\n",
			[]wantErr{{2, "", "YAML syntax error: found character that cannot start any token", ""}}},
		{"several problems at once", "hardware:\n  - {name: v100, price: 0}\nsessions:\n  - name: s\n    slo: 1\n    modules: [{name: a, model: m1, rate: -3}]\nbackends:\n  - {id: g, address: nope, hardware: v100}\n", []wantErr{
			{2, "hardware[v100].price", "must be a positive finite number", ""},
			{5, "sessions[s].slo", `"1" is not a duration`, ""},
			{6, "sessions[s].modules[a].rate", "got -3", ""},
			{8, "backends[g].address", "is not host:port", ""}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := LoadBytes(NamedDoc{Name: "test.yaml", Data: []byte(tc.yaml + base)})
			checkErrors(t, err, tc.want)
			if err == nil {
				if cfg == nil {
					t.Fatal("nil Config without an error")
				}
				if err := cfg.Validate(); err != nil {
					t.Errorf("Validate of a loaded config: %v", err)
				}
			} else if cfg != nil {
				t.Errorf("got a Config along with errors")
			}
		})
	}
}

func TestLoadBytesShape(t *testing.T) {
	tests := []struct {
		name string
		docs []NamedDoc
		want []wantErr
	}{
		{"no documents", nil, []wantErr{{0, "", "no config documents given", "-"}}},
		{"empty file", []NamedDoc{{"e.yaml", nil}}, []wantErr{{0, "", "file holds no config", "e.yaml"}}},
		{"comments only", []NamedDoc{{"c.yaml", []byte("# nothing yet\n")}}, []wantErr{{0, "", "file holds no config", "c.yaml"}}},
		{"binary", []NamedDoc{{"b.yaml", []byte("\x00\x01\xff")}}, []wantErr{{0, "", "YAML syntax error", "b.yaml"}}},
		{"errors in file order", []NamedDoc{
			{"b.yaml", []byte("hardware:\n  - {name: v100, price: 1}\n  - {name: x, price: -1}\n")},
			{"a.yaml", []byte("\n\nhardware:\n  - {name: v100, price: 2}\n")},
		}, []wantErr{
			{3, "hardware[x].price", "got -1", "b.yaml"},
			{4, "hardware[v100].name", "hardware v100 defined at b.yaml:2 and a.yaml:4", "a.yaml"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadBytes(tc.docs...)
			checkErrors(t, err, tc.want)
		})
	}
}

func TestLoadBytesValid(t *testing.T) {
	hw := `# catalog
hardware:
  - {name: v100, price: 3.06}
  - name: cpu-4c
    price: 0.2
membership: static
`
	rest := `profiles:
  - model: resnet50
    hardware: v100
    entries:
      - {batch: 8, duration: 18ms}
      - {batch: 16, concurrency: 0, duration: 30ms, }
---
sessions:
  - name: traffic
    slo: 400ms
    modules:
      - {name: detect, model: resnet50, rate: 100}
      - name: car
        model: resnet50
        after: [detect]
        rate: 60.5
backends:
  - {id: gpu-0, address: 127.0.0.1:9101, hardware: v100}
`
	cfg, err := LoadBytes(NamedDoc{"hw.yaml", []byte(hw)}, NamedDoc{"rest.yaml", []byte(rest)})
	if err != nil {
		t.Fatal(err)
	}
	_ = cfg
	want := &Config{
		Hardware: []Hardware{
			{Name: "v100", Price: 3.06, Source: Source{"hw.yaml", 3}},
			{Name: "cpu-4c", Price: 0.2, Source: Source{"hw.yaml", 4}},
		},
		Profiles: []Profile{{Model: "resnet50", Hardware: "v100", Source: Source{"rest.yaml", 2}, Entries: []ProfileEntry{
			{Batch: 8, Concurrency: 1, Duration: Duration(18 * time.Millisecond), Source: Source{"rest.yaml", 5}},
			{Batch: 16, Concurrency: 1, Duration: Duration(30 * time.Millisecond), Source: Source{"rest.yaml", 6}},
		}}},
		Sessions: []Session{{Name: "traffic", SLO: Duration(400 * time.Millisecond), Source: Source{"rest.yaml", 9}, Modules: []Module{
			{Name: "detect", Model: "resnet50", Rate: 100, Source: Source{"rest.yaml", 12}},
			{Name: "car", Model: "resnet50", Rate: 60.5, After: []string{"detect"}, Source: Source{"rest.yaml", 13}},
		}}},
		Backends:   []Backend{{ID: "gpu-0", Address: "127.0.0.1:9101", Hardware: "v100", Source: Source{"rest.yaml", 18}}},
		Membership: "static",
	}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("LoadBytes (-want +got):\n%s", diff)
	}
}

// TestLoadFiles covers what only files have: reading, unreadable paths, and
// duplicates across files naming both places.
func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.yaml", "hardware:\n  - {name: v100, price: 3.06}\nprofiles:\n  - {model: x, hardware: v100, entries: [{batch: 1, duration: 5ms}]}\n")
	b := write("b.yaml", "sessions:\n  - {name: s, slo: 1s, modules: [{name: m, model: x}]}\n")
	dup := write("dup.yaml", "# the same type again\n\nhardware:\n  - {name: t4, price: 1}\n  - {name: v100, price: 2}\n")

	t.Run("merge", func(t *testing.T) {
		cfg, err := Load(a, b)
		if err != nil {
			t.Fatal(err)
		}
		if len(cfg.Hardware) != 1 || len(cfg.Profiles) != 1 || len(cfg.Sessions) != 1 {
			t.Fatalf("merged config: %+v", cfg)
		}
		if got := cfg.Sessions[0].Source; got.File != b || got.Line != 2 {
			t.Errorf("session source = %v, want %s:2", got, b)
		}
	})
	t.Run("duplicate across files", func(t *testing.T) {
		_, err := Load(a, b, dup)
		checkErrors(t, err, []wantErr{{5, "hardware[v100].name", "hardware v100 defined at " + a + ":2 and " + dup + ":5", dup}})
	})
	t.Run("missing file", func(t *testing.T) {
		missing := filepath.Join(dir, "nope.yaml")
		_, err := Load(a, missing)
		checkErrors(t, err, []wantErr{{0, "", "cannot read config file: no such file or directory", missing}})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("errors.Is(err, fs.ErrNotExist) = false for %v", err)
		}
	})
	t.Run("missing file and a broken one", func(t *testing.T) {
		broken := write("broken.yaml", "hardware:\n  - {name: v100, price: cheap}\n")
		missing := filepath.Join(dir, "nope.yaml")
		// Both files' problems are reported, but not the references the other
		// files make into the missing one (b.yaml's model x).
		_, err := Load(missing, broken, b)
		checkErrors(t, err, []wantErr{
			{0, "", "cannot read config file", missing},
			{2, "hardware[v100].price", `got "cheap"`, broken}})
	})
	t.Run("directory", func(t *testing.T) {
		_, err := Load(dir)
		checkErrors(t, err, []wantErr{{0, "", "cannot read config file: is a directory", dir}})
	})
	t.Run("same file twice", func(t *testing.T) {
		again := dir + "/./a.yaml"
		_, err := Load(a, b, again)
		checkErrors(t, err, []wantErr{{0, "", "given twice (also as " + a + ")", again}})
	})
	t.Run("no files", func(t *testing.T) {
		cfg, err := Load()
		checkErrors(t, err, []wantErr{{0, "", "no config files given: want at least one YAML file", "-"}})
		if cfg != nil {
			t.Error("got a Config without files")
		}
	})
}

// TestPaperConfigs loads the repository's example configs: they must be clean.
func TestPaperConfigs(t *testing.T) {
	paths, err := filepath.Glob("../configs/paper/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example configs found: %v", err)
	}
	cfg, err := Load(paths...)
	if err != nil {
		t.Fatalf("configs/paper does not load cleanly:\n%v", err)
	}
	for _, name := range []string{"m1", "m2m3"} {
		s, ok := cfg.Session(name)
		if !ok {
			t.Errorf("session %s missing", name)
			continue
		}
		if _, err := s.TopoOrder(); err != nil {
			t.Errorf("session %s: %v", name, err)
		}
	}
}

func TestValidateBuiltConfig(t *testing.T) {
	good := func() *Config {
		return &Config{
			Hardware: []Hardware{{Name: "v100", Price: 3}},
			Profiles: []Profile{{Model: "x", Hardware: "v100", Entries: []ProfileEntry{{Batch: 1, Duration: Duration(10 * time.Millisecond)}}}},
			Sessions: []Session{{Name: "s", SLO: Duration(time.Second), Modules: []Module{{Name: "a", Model: "x"}, {Name: "b", Model: "x", After: []string{"a"}}}}},
			Backends: []Backend{{ID: "g", Address: "127.0.0.1:1", Hardware: "v100"}},
		}
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	c := good()
	c.Hardware = append(c.Hardware, Hardware{Name: "v100", Price: 1})
	c.Sessions[0].Modules[0].After = []string{"b"}
	c.Backends[0].Address = "nowhere"
	before := c.Profiles[0].Entries[0].Concurrency
	err := c.Validate()
	got := configErrors(t, err)
	want := []string{
		"<config>: hardware[v100].name: hardware v100 defined at hardware[0] and hardware[1]: hardware names must be unique",
		"<config>: sessions[s].modules: modules form a cycle: a -> b -> a; after must describe a DAG",
		`<config>: backends[g].address: "nowhere" is not host:port: want host:port such as 127.0.0.1:9101`,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i := range want {
		if got[i].Error() != want[i] {
			t.Errorf("error %d:\n got  %s\n want %s", i, got[i], want[i])
		}
	}
	if c.Profiles[0].Entries[0].Concurrency != before {
		t.Error("Validate modified the config")
	}
}

func TestConfigErrorFormat(t *testing.T) {
	tests := []struct {
		err  ConfigError
		want string
	}{
		{ConfigError{File: "a.yaml", Line: 3, Field: "hardware[v100].price", Msg: "must be > 0"}, "a.yaml:3: hardware[v100].price: must be > 0"},
		{ConfigError{File: "a.yaml", Line: 3, Msg: "YAML syntax error: x"}, "a.yaml:3: YAML syntax error: x"},
		{ConfigError{File: "a.yaml", Msg: "cannot read"}, "a.yaml: cannot read"},
		{ConfigError{Field: "membership", Msg: "bad"}, "<config>: membership: bad"},
	}
	for _, tc := range tests {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	// Joined errors still match the sentinel and unwrap to *ConfigError.
	_, err := LoadBytes(NamedDoc{"x.yaml", []byte("hardware:\n  - {name: a, price: 0}\n  - {name: b, price: 0}\n")})
	var ce *ConfigError
	if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || ce.Line != 2 {
		t.Errorf("joined error: Is=%v As=%v first=%v", errors.Is(err, ErrInvalidConfig), errors.As(err, &ce), ce)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 2 {
		t.Errorf("joined error has %d lines, want 2:\n%v", n, err)
	}
}

// TestLoadBytesAliasBomb checks that aliases cannot make the loader do
// exponential work: 1000 sessions × 1000 modules × 1000 after names from about
// 40 KB of YAML are cut off with an error.
func TestLoadBytesAliasBomb(t *testing.T) {
	const n = 1000
	var b strings.Builder
	b.WriteString("sessions:\n  - name: s\n    slo: 1s\n    modules: &ms\n      - &m {name: a, model: m1, after: [")
	b.WriteString(strings.Repeat("a, ", n-1) + "a]}\n")
	b.WriteString(strings.Repeat("      - *m\n", n-1))
	b.WriteString(strings.Repeat("  - {name: s, slo: 1s, modules: *ms}\n", n-1))
	start := time.Now()
	_, err := LoadBytes(NamedDoc{"bomb.yaml", []byte(b.String() + base)})
	if err == nil {
		t.Fatal("alias bomb loaded without error")
	}
	if !strings.Contains(err.Error(), "document expands to more than") {
		t.Errorf("error does not mention the expansion limit:\n%.3000s", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("alias bomb took %v", d)
	}
	t.Logf("%d bytes rejected in %v", b.Len(), time.Since(start))
}

// FuzzLoadBytes checks that no input makes LoadBytes panic, and that what it
// returns is consistent: either a Config that validates and whose sessions are
// DAGs, or only *ConfigError values naming the document. Seeds are in
// testdata/fuzz/FuzzLoadBytes.
func FuzzLoadBytes(f *testing.F) {
	f.Add([]byte(base))
	// join and race (after 02af265): accepted, refused and odd spellings.
	for _, m := range []string{
		"{name: j, model: m1, after: [b, a], join: anyof, race: 2}",
		"{name: j, model: m1, after: [a, b], join: allof, race: 8}",
		"{name: j, model: m1, after: [a], join: anyof}",
		"{name: j, model: m1, after: [a, b], join: ANYOF, race: 9}",
		"{name: j, model: m1, join: \"\", race: -1}",
		"{name: j, model: m1, after: [a, b], join: [anyof], race: 2.5}",
		"{name: j, model: m1, rate: 15, after: [a], fanout: {0: 2, 1: 1, 4: 1}}",
		"{name: j, model: m1, rate: 1, after: [a], fanout: {0: .nan, -1: 1, 1001: 2}}",
		"{name: j, model: m1, after: [a], fanout: {0: 0}}",
		"{name: j, model: m1, race: auto, tail: {share: 0.1, factor: 8}}",
		"{name: j, model: m1, race: 3, tail: {share: .nan, factor: 1e9}}",
		"{name: j, model: m1, tail: {share: 0.5}}",
	} {
		f.Add([]byte("sessions:\n  - name: s\n    slo: 25ms\n    modules:\n      - {name: a, model: m1, race: 1}\n      - {name: b, model: m2}\n      - " + m + "\n" + base))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := LoadBytes(NamedDoc{Name: "fuzz.yaml", Data: data})
		if err != nil {
			if cfg != nil {
				t.Fatal("Config returned along with errors")
			}
			for _, ce := range configErrors(t, err) {
				if (ce.File != "fuzz.yaml" && ce.File != "") || ce.Msg == "" || ce.Line < 0 {
					t.Fatalf("malformed error %#v", ce)
				}
			}
			_, again := LoadBytes(NamedDoc{Name: "fuzz.yaml", Data: data})
			if again == nil || again.Error() != err.Error() {
				t.Fatalf("second load differs:\n%v\n---\n%v", err, again)
			}
			return
		}
		if cfg == nil {
			t.Fatal("nil Config without an error")
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("loaded config does not validate: %v", err)
		}
		for i := range cfg.Sessions {
			if _, err := cfg.Sessions[i].TopoOrder(); err != nil {
				t.Fatalf("loaded session: %v", err)
			}
		}
		for _, p := range cfg.Profiles {
			for _, e := range p.Entries {
				if e.Concurrency < 1 || e.Batch < 1 || e.Duration <= 0 {
					t.Fatalf("loaded entry %+v", e)
				}
			}
		}
	})
}

// BenchmarkLoadBytes measures loading the paper's example configs (two files,
// parsed, merged and validated).
func BenchmarkLoadBytes(b *testing.B) {
	var docs []NamedDoc
	for _, name := range []string{"profiles.yaml", "sessions.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "configs", "paper", name))
		if err != nil {
			b.Fatal(err)
		}
		docs = append(docs, NamedDoc{Name: name, Data: data})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadBytes(docs...); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLoadBytesTooManyProblems checks that a badly broken file yields a bounded
// report that says it was cut.
func TestLoadBytesTooManyProblems(t *testing.T) {
	var b strings.Builder
	b.WriteString("hardware:\n")
	for i := 0; i < 500; i++ {
		b.WriteString("  - {name: h" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + ", price: 0}\n")
	}
	_, err := LoadBytes(NamedDoc{"big.yaml", []byte(b.String())})
	got := configErrors(t, err)
	if len(got) != maxErrors+1 {
		t.Fatalf("got %d errors, want %d and a summary", len(got), maxErrors)
	}
	if last := got[len(got)-1]; last.Msg != "too many problems: only the first 200 are shown" {
		t.Errorf("last error = %v, want the summary", last)
	}
}

// TestVariantAccuracyFromProfile: a variant without accuracy takes the one
// `piccolo profile --accuracy` wrote into its model's profile.
func TestVariantAccuracyFromProfile(t *testing.T) {
	doc := "profiles:\n  - {model: m3, hardware: unit, accuracy: 0.8, entries: [{batch: 1, duration: 5ms}]}\n" +
		"---\nsessions:\n  - name: s\n    slo: 1s\n    accuracy: 0.75\n    modules:\n      - name: a\n        variants: [{model: m1, accuracy: 0.95}, {model: m3}]\n"
	cfg, err := LoadBytes(NamedDoc{Name: "test.yaml", Data: []byte(doc + base)})
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Sessions[0].Modules[0]
	if got := m.Choices(); len(got) != 2 || got[0].Accuracy != 0.95 || got[1].Accuracy != 0.8 {
		t.Errorf("variants %+v: want m1 0.95 and m3 0.8 (from its profile)", got)
	}
	if a := cfg.Sessions[0].Accuracy; a == nil || *a != 0.75 {
		t.Errorf("session accuracy %v, want 0.75", a)
	}
}
