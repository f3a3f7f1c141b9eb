package tlsfiles

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TestPKI are the files NewTestPKI wrote.
type TestPKI struct {
	CA                    string // the CA's certificate (PEM)
	ServerCert, ServerKey string // for localhost, 127.0.0.1 and ::1
	ClientCert, ClientKey string // a client certificate the CA signed
}

// NewTestPKI writes, under dir, a new CA and a server and a client
// certificate it signed (ECDSA P-256, valid for a day), the files' names
// starting with name. For tests and demos, never for serving.
func NewTestPKI(dir, name string) (TestPKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return TestPKI{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return TestPKI{}, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := TestPKI{CA: filepath.Join(dir, name+"-ca.pem")}
	if err := writePEM(p.CA, "CERTIFICATE", caDER); err != nil {
		return TestPKI{}, err
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, server bool) (string, string, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return "", "", err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		if server {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return "", "", err
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return "", "", err
		}
		cf, kf := filepath.Join(dir, name+"-"+cn+".pem"), filepath.Join(dir, name+"-"+cn+"-key.pem")
		if err := writePEM(cf, "CERTIFICATE", der); err != nil {
			return "", "", err
		}
		return cf, kf, writePEM(kf, "EC PRIVATE KEY", kder)
	}
	if p.ServerCert, p.ServerKey, err = leaf(2, "server", x509.ExtKeyUsageServerAuth, true); err != nil {
		return TestPKI{}, fmt.Errorf("server certificate: %w", err)
	}
	if p.ClientCert, p.ClientKey, err = leaf(3, "client", x509.ExtKeyUsageClientAuth, false); err != nil {
		return TestPKI{}, fmt.Errorf("client certificate: %w", err)
	}
	return p, nil
}

func writePEM(file, typ string, der []byte) error {
	return os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
