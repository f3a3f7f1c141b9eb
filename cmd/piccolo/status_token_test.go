package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// TestStatusAdminToken boots `piccolo backend` and `piccolo gateway` with the
// admin API on, and runs `piccolo status` (the cobra command, flags parsed) with
// the right token from the flag and from the environment, a wrong token and
// none. With the token the plan comes from /admin/plan and the backends from
// /admin/backends; without it status warns once on stderr, naming the flag and
// the variable, and prints the plan from /metrics.
func TestStatusAdminToken(t *testing.T) {
	t.Setenv("PICCOLO_ADMIN_TOKEN", "") // the gateway takes its token from the flag
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sg := startSimGateway(t, ctx, detSessionConfig, func(_ *backendOptions, o *gatewayOptions) { o.adminToken = "tok" })
	url, backendAddr := sg.url, sg.backend

	// Rows every run prints, whichever source the plan comes from.
	planRows := []string{
		`(?m)^s +500ms +yes +`,
		`(?m)^s +d +\S+ +\S+ +20\.0 +\S+ +\S+ +v100×\S+ `,
	}
	backendRows := []string{
		`(?m)^backends \(from /admin/backends\): source static$`,
		`(?m)^ID +HARDWARE +ADDRESS +PLACED$`,
		`(?m)^gpu-0 +v100 +` + regexp.QuoteMeta(backendAddr) + ` +s/d$`,
	}
	const warning = "the plan comes from /metrics"
	for _, tc := range []struct {
		name      string
		env, flag string
		want      []string // regexps stdout matches
		wantNot   []string // regexps stdout must not match
		warn      string   // what stderr says; empty: nothing
	}{
		{name: "flag", flag: "tok", want: append([]string{`plan \(from /admin/plan\): policy piccolo, cost `}, backendRows...)},
		{name: "env", env: "tok", want: append([]string{`plan \(from /admin/plan\): policy piccolo, cost `}, backendRows...)},
		{name: "flag wins over env", env: "wrong", flag: "tok", want: []string{`plan \(from /admin/plan\)`}},
		{name: "wrong token", flag: "wrong", want: []string{`plan \(from /metrics\): cost `}, wantNot: []string{`/admin/backends`},
			warn: "refused the token (HTTP 401): check --admin-token or PICCOLO_ADMIN_TOKEN"},
		{name: "no token", want: []string{`plan \(from /metrics\): cost `}, wantNot: []string{`/admin/backends`},
			warn: "needs a token: pass --admin-token or set PICCOLO_ADMIN_TOKEN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PICCOLO_ADMIN_TOKEN", tc.env)
			args := []string{"--target", url}
			if tc.flag != "" {
				args = append(args, "--admin-token", tc.flag)
			}
			cmd := newStatusCmd()
			var out, errOut bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&errOut)
			cmd.SetArgs(args)
			if err := cmd.ExecuteContext(ctx); err != nil {
				t.Fatalf("status %v: %v\nstderr: %s", args, err, errOut.String())
			}
			t.Logf("piccolo status %v:\n%s", args, out.String())
			for _, re := range append(tc.want, planRows...) {
				if !regexp.MustCompile(re).MatchString(out.String()) {
					t.Errorf("stdout does not match %s", re)
				}
			}
			for _, re := range tc.wantNot {
				if regexp.MustCompile(re).MatchString(out.String()) {
					t.Errorf("stdout matches %s; it should not", re)
				}
			}
			stderr := errOut.String()
			switch {
			case tc.warn == "" && stderr != "":
				t.Errorf("stderr %q, want nothing", stderr)
			case tc.warn != "" && (!strings.Contains(stderr, tc.warn) || !strings.Contains(stderr, warning) || strings.Count(stderr, "\n") != 1):
				t.Errorf("stderr %q, want one line saying %q and %q", stderr, tc.warn, warning)
			}
		})
	}
}
