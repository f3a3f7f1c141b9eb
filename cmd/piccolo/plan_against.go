package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/piccolo-serving/piccolo/controlplane"
)

// planAgainst is `piccolo plan --against URL`: every session of files sent to
// the gateway at base as a dry run (PUT /admin/sessions/{name}?dry_run=true,
// the gateway's own fuse, plan and check steps on its pool and calibrated
// profiles; nothing changes there) and each answer's diff printed: a table,
// or the PlanDiffs as a JSON list with -o json. Errors: no sessions in files,
// the gateway unreachable or refusing the call (its error), and, after
// printing, one naming the sessions the gateway would refuse.
func planAgainst(w io.Writer, base, token string, files []string, output string) error {
	type doc struct {
		name string
		body []byte
	}
	var docs []doc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var d struct {
				Sessions []yaml.Node `yaml:"sessions"`
			}
			if err := dec.Decode(&d); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			for _, n := range d.Sessions {
				var s struct {
					Name string `yaml:"name"`
				}
				if err := n.Decode(&s); err != nil || s.Name == "" {
					return fmt.Errorf("%s:%d: a session without a name", f, n.Line)
				}
				body, err := yaml.Marshal(&n)
				if err != nil {
					return err
				}
				docs = append(docs, doc{s.Name, body})
			}
		}
	}
	if len(docs) == 0 {
		return fmt.Errorf("no sessions in %s: --against sends the files' sessions to the gateway as dry runs", strings.Join(files, ", "))
	}
	client := &http.Client{Timeout: 2 * time.Minute}
	var diffs []controlplane.PlanDiff
	var refused []string
	for _, d := range docs {
		req, err := http.NewRequest("PUT", strings.TrimSuffix(base, "/")+"/admin/sessions/"+url.PathEscape(d.name)+"?dry_run=true", bytes.NewReader(d.body))
		if err != nil {
			return fmt.Errorf("--against %s: %w", base, err)
		}
		req.Header.Set("Content-Type", "application/yaml")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("--against: %w", err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("--against: session %s: %w", d.name, err)
		}
		var pd controlplane.PlanDiff
		if (resp.StatusCode != 200 && resp.StatusCode != 422) || json.Unmarshal(b, &pd) != nil || !pd.DryRun {
			var e struct{ Error string }
			_ = json.Unmarshal(b, &e)
			if e.Error == "" {
				e.Error = strings.TrimSpace(string(b))
			}
			return fmt.Errorf("--against: session %s: the gateway answered %d: %s", d.name, resp.StatusCode, e.Error)
		}
		if !pd.WouldApply {
			refused = append(refused, d.name)
		}
		diffs = append(diffs, pd)
	}
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(diffs); err != nil {
			return err
		}
	} else {
		for i, d := range diffs {
			if i > 0 {
				fmt.Fprintln(w)
			}
			writeDiff(w, d)
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("the gateway would refuse session(s) %s", strings.Join(refused, ", "))
	}
	return nil
}

// writeDiff prints one dry run's answer as the operator reads it.
func writeDiff(w io.Writer, d controlplane.PlanDiff) {
	verdict := "would apply"
	if !d.WouldApply {
		verdict = "would be REFUSED: " + d.Error
	}
	fmt.Fprintf(w, "session %s (dry run on config version %d): %s\n", d.Session, d.Version, verdict)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  cost\t%.2f\t->\t%.2f\t(%+.2f)\n", d.CostBefore, d.CostAfter, d.CostAfter-d.CostBefore)
	for _, h := range d.Hardware {
		fmt.Fprintf(tw, "  machines %s\t%.2f\t->\t%.2f\t(%+.2f)\n", h.Hardware, h.Before, h.After, h.Delta)
	}
	if a, ok := d.Attainment[d.Session]; ok {
		fmt.Fprintf(tw, "  simulated SLO attainment\t%.2f%%\n", 100*a)
	}
	tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  module\tbefore\t\tafter")
	for _, m := range d.Modules {
		if m.Error != "" {
			fmt.Fprintf(tw, "  %s\t\t\tnot planned: %s\n", m.Session, m.Error)
			continue
		}
		fmt.Fprintf(tw, "  %s/%s\t%s\t->\t%s\n", m.Session, m.Module, configsText(m.Before), configsText(m.After))
	}
	tw.Flush()
}

// configsText is a module's configs as "v100 b8 c1 x0.51, ...".
func configsText(cs []controlplane.ConfigView) string {
	if len(cs) == 0 {
		return "-"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s b%d c%d x%.2f", c.Hardware, c.Batch, c.Concurrency, c.Machines)
	}
	return strings.Join(parts, ", ")
}
