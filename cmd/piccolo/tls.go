package main

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/piccolo-serving/piccolo/internal/tlsfiles"
)

// tlsFlags are a listener's --tls-cert, --tls-key and --tls-client-ca.
type tlsFlags struct {
	cert, key, clientCA string
}

func (t *tlsFlags) register(f *pflag.FlagSet, what string) {
	f.StringVar(&t.cert, "tls-cert", "", what+" over TLS with this PEM certificate (chain), reloaded when the file changes; needs --tls-key")
	f.StringVar(&t.key, "tls-key", "", "the PEM private key of --tls-cert, reloaded with it")
	f.StringVar(&t.clientCA, "tls-client-ca", "", "with --tls-cert: require clients to present a certificate signed by a CA in this PEM file (mutual TLS)")
}

// on reports whether TLS was asked for.
func (t *tlsFlags) on() bool { return t.cert != "" || t.key != "" }

// config returns the listeners' TLS config, nil when TLS is off; the error
// names the flag that is wrong.
func (t *tlsFlags) config() (*tls.Config, error) {
	switch {
	case !t.on():
		if t.clientCA != "" {
			return nil, errors.New("--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS")
		}
		return nil, nil
	case t.cert == "" || t.key == "":
		return nil, errors.New("--tls-cert and --tls-key go together: give both, or neither for plain text")
	}
	r, err := tlsfiles.NewReloader(t.cert, t.key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	return tlsfiles.ServerConfig(r, t.clientCA)
}

// backendTLS returns the TLS config of the gateway's calls to the backends
// that serve TLS (tlsfiles.BackendClientConfig of the --backend-* flags).
func (o *gatewayOptions) backendTLS() (*tls.Config, error) {
	return tlsfiles.BackendClientConfig(o.backendCA, o.backendCert, o.backendKey)
}
