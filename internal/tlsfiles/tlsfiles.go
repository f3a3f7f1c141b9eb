package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// recheck is how often, at most, GetCertificate looks at the files.
const recheck = time.Second

// Reloader serves a certificate and key from PEM files and loads them again
// when either file's modification time changes. A pair that fails to load
// (half written, mismatched) leaves the previous one served; Err says why.
type Reloader struct {
	certFile, keyFile string

	cert    atomic.Pointer[tls.Certificate]
	checked atomic.Int64 // unix ns of the last look at the files

	mu              sync.Mutex // one reload at a time
	certMod, keyMod time.Time
	lastErr         atomic.Pointer[error]
}

// NewReloader loads certFile and keyFile; the error names the file that
// could not be read or the pair that does not match.
func NewReloader(certFile, keyFile string) (*Reloader, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tls: want both a certificate (--tls-cert) and its key (--tls-key)")
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile}
	if err := r.reload(true); err != nil {
		return nil, err
	}
	return r, nil
}

// GetCertificate is tls.Config.GetCertificate: the current certificate,
// reloaded first when the files changed (looked at once a second at most).
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if now := time.Now().UnixNano(); now-r.checked.Load() >= int64(recheck) {
		r.checked.Store(now)
		_ = r.reload(false)
	}
	return r.cert.Load(), nil
}

// Err returns why the last reload failed (nil: the files served are the
// ones on disk).
func (r *Reloader) Err() error {
	if p := r.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// reload loads the pair when forced or when a file's modification time
// changed since the last load.
func (r *Reloader) reload(force bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs, err := os.Stat(r.certFile)
	if err != nil {
		return r.fail(fmt.Errorf("tls certificate %s: %w", r.certFile, err))
	}
	ks, err := os.Stat(r.keyFile)
	if err != nil {
		return r.fail(fmt.Errorf("tls key %s: %w", r.keyFile, err))
	}
	if !force && cs.ModTime().Equal(r.certMod) && ks.ModTime().Equal(r.keyMod) {
		return nil
	}
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return r.fail(fmt.Errorf("tls certificate %s and key %s: %w", r.certFile, r.keyFile, err))
	}
	r.cert.Store(&pair)
	r.certMod, r.keyMod = cs.ModTime(), ks.ModTime()
	r.lastErr.Store(nil)
	return nil
}

func (r *Reloader) fail(err error) error {
	r.lastErr.Store(&err)
	return err
}

// ServerConfig returns the TLS config of a listener serving r's certificate
// (TLS 1.2 at least). With clientCA, a file of PEM CA certificates, clients
// must present a certificate signed by one of them (mutual TLS).
func ServerConfig(r *Reloader, clientCA string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
	if clientCA != "" {
		pool, err := LoadCAs(clientCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientConfig returns the TLS config of a client that verifies its servers
// with the CAs in caFile (PEM), or with the system's roots when caFile is "",
// and presents cert's certificate when the server asks for one (nil: none).
func ClientConfig(caFile string, cert *Reloader) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert.GetCertificate(nil)
		}
	}
	if caFile != "" {
		pool, err := LoadCAs(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// LoadCAs reads a file of PEM CA certificates.
func LoadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// GRPCCreds returns the gRPC server option serving cfg's TLS (none when cfg
// is nil): the backend's and the gateway's gRPC listeners.
func GRPCCreds(cfg *tls.Config) []grpc.ServerOption {
	if cfg == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}
}

// BackendClientConfig returns the TLS config of a gateway's calls to the
// backends that serve TLS (gateway --backend-ca, --backend-cert,
// --backend-key): nil (the system's roots, no client certificate) when all
// three are empty. Errors name the flag: a certificate without its key or
// the other way round, or files that do not load.
func BackendClientConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	var cert *Reloader
	if certFile != "" || keyFile != "" {
		if certFile == "" || keyFile == "" {
			return nil, errors.New("--backend-cert and --backend-key go together: give both, or neither")
		}
		var err error
		if cert, err = NewReloader(certFile, keyFile); err != nil {
			return nil, fmt.Errorf("--backend-cert/--backend-key: %w", err)
		}
	}
	cfg, err := ClientConfig(caFile, cert)
	if err != nil {
		return nil, fmt.Errorf("--backend-ca: %w", err)
	}
	return cfg, nil
}
