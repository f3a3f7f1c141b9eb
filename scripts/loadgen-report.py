"""One line from a `piccolo loadgen -o json` report: sent, the share of all
requests within the SLO (refusals count against it), refused, 504s, other
errors, p99. Usage: loadgen-report.py REPORT.json LABEL (the live scripts)."""
import json
import sys

d = json.load(open(sys.argv[1]))
e = d["errors"]
s = d["sent"]
ref = e.get("rejected: overloaded", 0)
print("  %-8s sent %5d  within SLO %7.3f%% of all  refused %4d  504 %d  other errors %d  p50 %.0f ms  p99 %.0f ms" % (
    sys.argv[2], s, 100 * d["slo_attainment"], ref, e.get("deadline", 0),
    sum(v for k, v in e.items() if k not in ("rejected: overloaded", "deadline")), d["p50_ms"], d["p99_ms"]))
