package main

import (
	"github.com/spf13/pflag"

	"github.com/piccolo-serving/piccolo/backends/membership"
)

// addConsulAuthFlags binds the Consul client's ACL token and TLS flags of
// `piccolo gateway`, `scheduler` and `backend` to a (membership.NewClient
// takes what is left empty from the consul CLI's environment).
func addConsulAuthFlags(f *pflag.FlagSet, a *membership.ConsulAuth) {
	f.StringVar(&a.Token, "consul-token", "", "with --consul: the Consul ACL token (default: $CONSUL_HTTP_TOKEN or the file $CONSUL_HTTP_TOKEN_FILE; docs/deploy.md, \"Consul ACLs and TLS\")")
	f.StringVar(&a.CAFile, "consul-cacert", "", "with --consul: PEM CA of the Consul agent's certificate; turns HTTPS on (default: $CONSUL_CACERT)")
	f.StringVar(&a.CertFile, "consul-client-cert", "", "with --consul: PEM client certificate for mutual TLS with the agent, with --consul-client-key (default: $CONSUL_CLIENT_CERT)")
	f.StringVar(&a.KeyFile, "consul-client-key", "", "with --consul: the client certificate's PEM key (default: $CONSUL_CLIENT_KEY)")
	f.BoolVar(&a.TLS, "consul-tls", false, "with --consul: speak HTTPS to the agent (default: $CONSUL_HTTP_SSL; on when a CA or client certificate is given)")
}
