# Consul ACL policy of `piccolo backend` (docs/deploy.md, "Consul ACLs and
# TLS"): register itself as service piccolo-backend with its TCP check, read
# its registration back (the keeper re-registers after an agent restart),
# deregister on shutdown. Nothing else: no KV, no other service.
service "piccolo-backend" {
  policy = "write"
}
