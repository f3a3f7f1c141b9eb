# Consul ACL policy of `piccolo gateway --consul` (docs/deploy.md, "Consul
# ACLs and TLS"): the cluster's keys under piccolo/ (it writes admin config
# changes, its rates and its calibration, and follows the plan), the backends'
# membership (read) and, since gateways run for the cluster's scheduler by
# default (--schedule), what a scheduler candidate needs: its service
# piccolo-scheduler and the session of the lock. A gateway run with
# --schedule=false needs neither of the last two.
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
