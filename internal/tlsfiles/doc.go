// Package tlsfiles makes the TLS configs of Piccolo's listeners and clients
// from PEM files: a server's certificate and key, reloaded when the files
// change (Reloader, through tls.Config.GetCertificate, so a renewed
// certificate is served without a restart), an optional CA whose
// certificates clients must present (mutual TLS), and the CA a client
// verifies its servers with.
//
// Who calls what: cmd/piccolo builds the configs from the --tls-* flags of
// `piccolo gateway` (HTTPS and gRPC to clients, TLS to backends) and
// `piccolo backend` (its gRPC listener). A Reloader is safe for concurrent
// use: GetCertificate runs on every handshake, reads an atomic pointer, and
// looks at the files' modification times at most once a second.
//
// NewTestPKI writes a CA, a server certificate and a client certificate,
// for tests and demos only.
package tlsfiles
