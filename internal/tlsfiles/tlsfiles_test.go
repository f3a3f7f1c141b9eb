package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"
)

// The reloader serves the pair on disk: a renewed pair (copied over the
// files) is served from the next handshake after the once-a-second look; a
// broken one leaves the previous pair served and says why.
func TestReloaderFollowsTheFiles(t *testing.T) {
	dir := t.TempDir()
	a, err := NewTestPKI(dir, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewTestPKI(dir, "b")
	if err != nil {
		t.Fatal(err)
	}
	cert, key := dir+"/cert.pem", dir+"/key.pem"
	cp := func(from, to string, at time.Time) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(to, at, at); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	cp(a.ServerCert, cert, now)
	cp(a.ServerKey, key, now)
	r, err := NewReloader(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	issuer := func() string {
		r.checked.Store(0) // as if a second had passed
		c, err := r.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		x, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return x.Issuer.CommonName
	}
	if got := issuer(); got != "a test CA" {
		t.Fatalf("serving a certificate of %q, want a's", got)
	}
	later := now.Add(time.Minute)
	cp(b.ServerCert, cert, later)
	cp(b.ServerKey, key, later)
	if got := issuer(); got != "b test CA" {
		t.Errorf("after the renewal serving %q, want b's", got)
	}
	cp(a.ServerKey, key, later.Add(time.Minute)) // a's key under b's certificate
	if got := issuer(); got != "b test CA" || r.Err() == nil {
		t.Errorf("after a broken renewal serving %q (err %v), want b's still and an error", got, r.Err())
	}
	if _, err := NewReloader(cert, ""); err == nil {
		t.Error("NewReloader without a key: no error")
	}
	if _, err := ServerConfig(r, dir+"/missing.pem"); err == nil {
		t.Error("ServerConfig with a missing client CA: no error")
	}
}
