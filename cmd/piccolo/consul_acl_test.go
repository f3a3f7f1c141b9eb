package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"

	"github.com/piccolo-serving/piccolo/internal/consultest"
)

// TestConsulACLPolicies: on a real Consul agent with ACLs on (deny by
// default), tokens holding only the policies of deploy/consul/acl are
// enough: a backend registers with its token (from CONSUL_HTTP_TOKEN, as
// the consul CLI reads it), a gateway with its own (--consul-token) plans,
// elects itself the scheduler and serves; a backend without a token is
// refused at start with Consul's answer.
func TestConsulACLPolicies(t *testing.T) {
	agent := consultest.StartACL(t, "root")
	admin, err := capi.NewClient(&capi.Config{Address: agent.Addr(), Token: "root"})
	if err != nil {
		t.Fatal(err)
	}
	token := func(component string) string {
		rules, err := os.ReadFile(filepath.Join("..", "..", "deploy", "consul", "acl", component+".hcl"))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := admin.ACL().PolicyCreate(&capi.ACLPolicy{Name: "piccolo-" + component, Rules: string(rules)}, nil); err != nil {
			t.Fatalf("policy %s: %v", component, err)
		}
		tok, _, err := admin.ACL().TokenCreate(&capi.ACLToken{Policies: []*capi.ACLTokenPolicyLink{{Name: "piccolo-" + component}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tok.SecretID
	}
	backendTok, gatewayTok := token("backend"), token("gateway")
	token("scheduler") // parses and is accepted

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, consulTestConfig, 20.0), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bo := func(id string) *backendOptions {
		return &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath}, executor: "sim", logFmt: "json",
			drain: time.Second, metrics: "off", consul: agent.Addr(), id: id, token: "tok"}
	}
	t.Setenv("CONSUL_HTTP_TOKEN", "")
	if err := runBackend(ctx, bo("no-token"), nil); err == nil || !strings.Contains(err.Error(), "--consul") || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("a backend without a Consul token: %v; want Consul's refusal under --consul", err)
	}
	t.Setenv("CONSUL_HTTP_TOKEN", backendTok)
	startBackend(t, ctx, bo("gpu-0"))
	o := &gatewayOptions{files: []string{cfgPath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", policy: "piccolo",
		dispatch: "tc", maxBody: 1 << 20, slack: 0.1, logFmt: "json", drain: time.Second, consul: agent.Addr(),
		schedule: true, backendToken: "tok"}
	o.consulAuth.Token = gatewayTok // over the backend's in the environment
	url, _ := startGateway(t, ctx, o)
	for sent := 0; ; sent++ {
		resp, err := http.Post(url+"/v2/models/s/infer", "application/json", strings.NewReader(inferBody))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			break
		}
		if sent == 20 {
			t.Fatalf("no request answered 200 in 20; last %d", resp.StatusCode)
		}
	}
}
