package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/piccolo-serving/piccolo/api/inference"
	"github.com/piccolo-serving/piccolo/internal/tlsfiles"
)

// TestTLSEndToEnd: a gateway serving HTTPS and gRPC over TLS with mutual
// TLS for its clients, over a backend that serves gRPC over TLS (tls: true
// in backends:) and asks the gateway for its client certificate, all with
// certificates the test makes. A client with the
// CA's client certificate is served over both protocols (and so are curl
// and grpcurl); one without a certificate is refused at the handshake; a
// renewed certificate copied over the files is served without a restart.
func TestTLSEndToEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	pki, err := tlsfiles.NewTestPKI(dir, "one")
	if err != nil {
		t.Fatal(err)
	}
	// The gateway serves copies, so that the test can renew them.
	gwCert, gwKey := filepath.Join(dir, "gw.pem"), filepath.Join(dir, "gw-key.pem")
	copyFile(t, pki.ServerCert, gwCert, time.Now())
	copyFile(t, pki.ServerKey, gwKey, time.Now())

	cfgPath := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfgPath, []byte(strings.ReplaceAll(cancelConfig, "duration: 1s", "duration: 5ms")), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _ := startBackend(t, ctx, &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath}, executor: "sim",
		logFmt: "json", drain: time.Second, tls: tlsFlags{cert: pki.ServerCert, key: pki.ServerKey, clientCA: pki.CA}})
	bePath := filepath.Join(dir, "backends.yaml")
	if err := os.WriteFile(bePath, fmt.Appendf(nil, "backends:\n  - {id: gpu-0, address: %q, hardware: v100, tls: true}\n", addr), 0o644); err != nil {
		t.Fatal(err)
	}
	httpAddr, grpcAddr, _ := startGatewayAddrs(t, ctx, &gatewayOptions{files: []string{cfgPath, bePath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0",
		policy: "piccolo", dispatch: "tc", maxBody: 1 << 20, slack: 0.1, logFmt: "json", drain: time.Second,
		tls: tlsFlags{cert: gwCert, key: gwKey, clientCA: pki.CA}, backendCA: pki.CA, backendCert: pki.ClientCert, backendKey: pki.ClientKey})

	roots, err := tlsfiles.LoadCAs(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	clientPair, err := tls.LoadX509KeyPair(pki.ClientCert, pki.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	withCert := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientPair}}
	post := func(cfg *tls.Config) (int, string, error) {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
		resp, err := c.Post("https://"+httpAddr+"/v2/models/one/infer", "application/json", strings.NewReader(cancelBody))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	if code, body, err := post(withCert); err != nil || code != 200 {
		t.Fatalf("HTTPS with a client certificate: %d %s %v; want 200 (the backend call over TLS too)", code, body, err)
	}
	if _, _, err := post(&tls.Config{RootCAs: roots}); err == nil {
		t.Error("HTTPS without a client certificate was served; want the handshake refused (--tls-client-ca)")
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(withCert)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := inference.NewGRPCInferenceServiceClient(conn).ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "one",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "input0", Datatype: "FP32", Shape: []int64{1, 4},
			Contents: &inference.InferTensorContents{Fp32Contents: []float32{1, 2, 3, 4}}}}})
	if err != nil || len(resp.GetOutputs()) == 0 {
		t.Fatalf("gRPC over TLS: %v", err)
	}

	// The docs' examples, run for real.
	out := runTool(t, interopTool(t, "curl", "curl"), "-sS", "--fail-with-body", "--cacert", pki.CA, "--cert", pki.ClientCert, "--key", pki.ClientKey,
		"-H", "Content-Type: application/json", "-d", cancelBody, "https://"+httpAddr+"/v2/models/one/infer")
	if !strings.Contains(out, `"model_name":"one"`) {
		t.Errorf("curl over mutual TLS: %s", out)
	}
	grpcurl := interopTool(t, "grpcurl", "grpcurl")
	out = runTool(t, grpcurl, "-cacert", pki.CA, "-cert", pki.ClientCert, "-key", pki.ClientKey, grpcAddr, "list")
	if !strings.Contains(out, "inference.GRPCInferenceService") {
		t.Errorf("grpcurl list over mutual TLS: %s", out)
	}
	out = runTool(t, grpcurl, "-cacert", pki.CA, "-cert", pki.ClientCert, "-key", pki.ClientKey,
		"-d", `{"model_name":"one","inputs":[{"name":"input0","datatype":"FP32","shape":[1,4],"contents":{"fp32_contents":[1,2,3,4]}}]}`,
		grpcAddr, "inference.GRPCInferenceService/ModelInfer")
	if !strings.Contains(out, `"modelName": "one"`) {
		t.Errorf("grpcurl ModelInfer over mutual TLS: %s", out)
	}

	// Renewal: a certificate of another CA copied over the files.
	renewed, err := tlsfiles.NewTestPKI(dir, "two")
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	copyFile(t, renewed.ServerCert, gwCert, later)
	copyFile(t, renewed.ServerKey, gwKey, later)
	issuer := func() string {
		c, err := tls.Dial("tcp", httpAddr, &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{clientPair}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Issuer.CommonName
	}
	deadline := time.Now().Add(5 * time.Second)
	for issuer() != "two test CA" {
		if time.Now().After(deadline) {
			t.Fatalf("still serving the certificate of %q 5 s after the files were renewed", issuer())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func copyFile(t *testing.T, from, to string, mtime time.Time) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(to, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// Each wrong combination of the TLS flags is an error naming the flags.
func TestTLSFlagErrors(t *testing.T) {
	dir := t.TempDir()
	pki, err := tlsfiles.NewTestPKI(dir, "f")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		f    tlsFlags
		want string
	}{
		{"cert without key", tlsFlags{cert: pki.ServerCert}, "--tls-cert and --tls-key go together"},
		{"client CA alone", tlsFlags{clientCA: pki.CA}, "--tls-client-ca needs --tls-cert"},
		{"missing cert file", tlsFlags{cert: dir + "/nope.pem", key: pki.ServerKey}, "nope.pem"},
		{"key of another pair", tlsFlags{cert: pki.ServerCert, key: pki.ClientKey}, "--tls-cert/--tls-key"},
		{"client CA not PEM", tlsFlags{cert: pki.ServerCert, key: pki.ServerKey, clientCA: pki.ServerKey}, "--tls-client-ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.f.config(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("config() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if cfg, err := (&tlsFlags{}).config(); cfg != nil || err != nil {
		t.Errorf("no flags: %v, %v; want plain text (nil, nil)", cfg, err)
	}
	o := &gatewayOptions{backendCert: pki.ClientCert}
	if _, err := o.backendTLS(); err == nil || !strings.Contains(err.Error(), "--backend-cert and --backend-key go together") {
		t.Errorf("--backend-cert alone: %v", err)
	}
}

// TestBackendTLSRequired: with --backend-tls required the gateway calls a
// backend over TLS although its entry does not say tls (the gateway decides,
// not what a backend registers); the backend, which serves TLS only,
// answers.
func TestBackendTLSRequired(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	pki, err := tlsfiles.NewTestPKI(dir, "req")
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "piccolo.yaml")
	if err := os.WriteFile(cfgPath, []byte(strings.ReplaceAll(cancelConfig, "duration: 1s", "duration: 5ms")), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _ := startBackend(t, ctx, &backendOptions{listen: "127.0.0.1:0", hardware: "v100", files: []string{cfgPath}, executor: "sim",
		logFmt: "json", drain: time.Second, tls: tlsFlags{cert: pki.ServerCert, key: pki.ServerKey}})
	bePath := filepath.Join(dir, "backends.yaml")
	if err := os.WriteFile(bePath, fmt.Appendf(nil, "backends:\n  - {id: gpu-0, address: %q, hardware: v100}\n", addr), 0o644); err != nil {
		t.Fatal(err)
	}
	httpAddr, _, _ := startGatewayAddrs(t, ctx, &gatewayOptions{files: []string{cfgPath, bePath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0",
		policy: "piccolo", dispatch: "tc", maxBody: 1 << 20, slack: 0.1, logFmt: "json", drain: time.Second,
		backendCA: pki.CA, backendTLSMode: "required"})
	resp, err := http.Post("http://"+httpAddr+"/v2/models/one/infer", "application/json", strings.NewReader(cancelBody))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("infer through a TLS-only backend whose entry says nothing of TLS, --backend-tls required: %d %s; want 200", resp.StatusCode, b)
	}
	o := &gatewayOptions{files: []string{cfgPath, bePath}, listen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", policy: "piccolo", dispatch: "tc",
		maxBody: 1 << 20, slack: 0.1, logFmt: "json", drain: time.Second, backendTLSMode: "sometimes"}
	if err := runGateway(ctx, o, nil); err == nil || !strings.Contains(err.Error(), "--backend-tls") {
		t.Errorf("--backend-tls sometimes: %v; want an error naming the flag", err)
	}
}
