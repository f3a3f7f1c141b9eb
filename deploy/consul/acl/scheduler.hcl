# Consul ACL policy of `piccolo scheduler` (docs/deploy.md, "Consul ACLs and
# TLS"): the cluster's keys under the KV prefix piccolo/ (config, plan, rates,
# calibration, the leader lock), the backends' membership (read), its own
# candidate service piccolo-scheduler with its TTL check, and the session
# that holds the lock. Change "piccolo/" with --cluster-prefix.
key_prefix "piccolo/" {
  policy = "write"
}
service "piccolo-backend" {
  policy = "read"
}
service "piccolo-scheduler" {
  policy = "write"
}
node_prefix "" {
  policy = "read"
}
session_prefix "" {
  policy = "write"
}
