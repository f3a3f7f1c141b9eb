#!/usr/bin/env python3
"""Helpers of scripts/gpu-check.sh that are easier in Python than in bash; the
GPU machine has python3 but maybe not curl or PyYAML, so this uses the standard
library only.

  gpu-check.py free-port                      a free loopback TCP port
  gpu-check.py wait-line FILE TEXT SECONDS    wait until FILE has a line with TEXT; print it
  gpu-check.py fetch URL                      GET URL, print the body
  gpu-check.py sample URL PHASEFILE OUT SEC   every SEC s append the piccolo_gpu_* series
                                              of URL to OUT (TSV), tagged with PHASEFILE's
                                              text, until killed
  gpu-check.py session MODEL HW PROFILES LOAD SLO_MS OUT
                                              write the session config (rate = LOAD x the
                                              best items/s of MODEL's profile on one
                                              machine; SLO = SLO_MS, or 0: 4 x the
                                              largest batch's duration at concurrency 1)
                                              and print "RATE SLO_MS"
  gpu-check.py jpeg WxH OUT                   write a WxH JPEG (quality 90) of gradients and
                                              noise to OUT, with torchvision
  gpu-check.py summary DIR [PUBLISHED]        write DIR/summary.md from the run's files;
                                              PUBLISHED: the TSV of published figures
                                              (scripts/gpu-published.tsv)
"""

import glob
import json
import os
import re
import socket
import sys
import time
import urllib.request

ENTRY = re.compile(r"\{batch:\s*(\d+),\s*concurrency:\s*(\d+),\s*duration:\s*([0-9.]+)(ms|s|us|µs)\}")
MODEL = re.compile(r"-\s*model:\s*(\S+)")
GPU_SERIES = {
    "piccolo_gpu_utilization_ratio": "util",
    "piccolo_gpu_memory_utilization_ratio": "mem_util",
    "piccolo_gpu_memory_used_bytes": "mem_used_bytes",
    "piccolo_gpu_memory_total_bytes": "mem_total_bytes",
    "piccolo_gpu_power_watts": "power_w",
}


def ms(value, unit):
    return float(value) * {"ms": 1, "s": 1000, "us": 0.001, "µs": 0.001}[unit]


def read_profile(path):
    """{model: [(batch, concurrency, duration_ms)]} from a profile YAML written
    by `piccolo profile` (one flow-style entry per line)."""
    out, model = {}, None
    with open(path) as f:
        for line in f:
            m = MODEL.search(line)
            if m:
                model = m.group(1)
                out.setdefault(model, [])
                continue
            e = ENTRY.search(line)
            if e and model:
                out[model].append((int(e.group(1)), int(e.group(2)), ms(e.group(3), e.group(4))))
    return out


def fetch(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def gpu_series(text):
    vals = {}
    for line in text.splitlines():
        for name, key in GPU_SERIES.items():
            if line.startswith(name + "{") or line.startswith(name + " "):
                vals[key] = float(line.rsplit(" ", 1)[1])  # first GPU's (or the one) value
    return vals


def cmd_sample(url, phasefile, out, period):
    keys = list(GPU_SERIES.values())
    with open(out, "a") as f:
        if f.tell() == 0:
            f.write("time_s\tphase\t" + "\t".join(keys) + "\n")
        t0 = time.monotonic()
        while True:
            try:
                phase = open(phasefile).read().strip()
            except OSError:
                phase = "?"
            try:
                vals = gpu_series(fetch(url))
            except OSError:
                vals = {}
            f.write("%.1f\t%s\t%s\n" % (time.monotonic() - t0, phase, "\t".join("%g" % vals[k] if k in vals else "" for k in keys)))
            f.flush()
            time.sleep(period)


def cmd_session(model, hw, profiles, load, slo_ms, out):
    entries = read_profile(profiles).get(model)
    if not entries:
        sys.exit("gpu-check: %s has no profile of %s" % (profiles, model))
    best = max(c * b / d * 1000 for b, c, d in entries)
    rate = round(float(load) * best, 1)
    slo = float(slo_ms)
    if slo <= 0:
        c1 = [(b, d) for b, c, d in entries if c == 1] or [(b, d) for b, c, d in entries]
        slo = 4 * max(c1)[1]
    slo = max(1, int(slo + 0.999))
    with open(out, "w") as f:
        f.write("# Written by scripts/gpu-check.sh: one module on %s, at %s x the best\n"
                "# single-machine throughput of its profile (%.1f items/s); SLO 4 x the\n"
                "# largest batch's p90 duration unless GPU_CHECK_SLO_MS is set.\n" % (model, load, best))
        f.write("sessions:\n  - name: gpucheck\n    slo: %dms\n    modules:\n      - {name: net, model: %s, rate: %g}\n" % (slo, model, rate))
    print(rate, slo)


def cmd_jpeg(size, out):
    import torch
    from torchvision.io import encode_jpeg
    w, h = (int(v) for v in size.lower().split("x"))
    g = torch.Generator().manual_seed(37)
    y = torch.linspace(0, 1, h).view(1, h, 1)
    x = torch.linspace(0, 1, w).view(1, 1, w)
    base = torch.stack([x.expand(1, h, w)[0], y.expand(1, h, w)[0], (x * y).expand(1, h, w)[0]]) * 200
    img = (base + 40 * torch.rand(3, h, w, generator=g)).clamp(0, 255).to(torch.uint8)
    with open(out, "wb") as f:
        f.write(bytes(encode_jpeg(img, quality=90).numpy()))


def published_section(profiles, hw, path):
    """Each profiled model's best items/s beside the published figures of
    PUBLISHED for the same model on the same hardware (a TSV: model, hardware,
    precision, items_per_s, setting, source)."""
    rows = []
    if path and os.path.exists(path):
        with open(path) as f:
            head = None
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                cols = line.rstrip("\n").split("\t")
                if head is None:
                    head = cols
                    continue
                rows.append(dict(zip(head, cols)))
    lines = ["## Against published figures (scripts/gpu-published.tsv)", "",
             "| model | best here (items/s, point) | published (items/s) | setting | source |", "|---|---:|---:|---|---|"]
    for model, entries in read_profile(profiles).items():
        b, c, d = max(entries, key=lambda e: e[1] * e[0] / e[2])
        here = "%.0f (b%d c%d)" % (c * b / d * 1000, b, c)
        base = model.split("+")[-1]
        pub = [r for r in rows if r.get("model") == base and r.get("hardware") == hw]
        if not pub:
            lines.append("| %s | %s | none for %s on %s | | |" % (model, here, base, hw))
        for r in pub:
            lines.append("| %s | %s | %s | %s %s | %s |" % (model, here, r.get("items_per_s") or "to fill", r.get("precision", ""),
                                                          r.get("setting", ""), r.get("source", "")))
    return lines + [""]


def stats(rows, key):
    vals = [float(r[key]) for r in rows if r.get(key)]
    if not vals:
        return None
    return min(vals), sum(vals) / len(vals), max(vals)


def cmd_summary(d, published=""):
    lines = ["# gpu-check summary", ""]
    failed = os.path.join(d, "FAILED")
    if os.path.exists(failed):
        lines += ["**FAILED**: " + open(failed).read().strip(), ""]
    env = os.path.join(d, "env.txt")
    if os.path.exists(env):
        lines += ["```", open(env).read().strip(), "```", ""]
    prof = os.path.join(d, "profiles.yaml")
    if os.path.exists(prof):
        lines += ["## Batch curves (`piccolo profile`: duration = p90 call latency; items/s = c·b/d)", ""]
        for model, entries in read_profile(prof).items():
            lines += ["### " + model, "", "| concurrency | batch | p90 ms | items/s (c·b/d) |", "|---:|---:|---:|---:|"]
            for b, c, dur in sorted(entries, key=lambda e: (e[1], e[0])):
                lines.append("| %d | %d | %.2f | %.1f |" % (c, b, dur, c * b / dur * 1000))
            c1 = sorted((b, c * b / dur * 1000) for b, c, dur in entries if c == 1)
            if len(c1) >= 2:
                lines += ["", "Concurrency 1: %.1f items/s at batch %d, %.1f at batch %d (×%.2f)."
                          % (c1[0][1], c1[0][0], c1[-1][1], c1[-1][0], c1[-1][1] / c1[0][1])]
            lines.append("")
    if os.path.exists(prof):
        hw = re.search(r"name:\s*([^,}\s]+)", open(prof).readline())
        lines += published_section(prof, hw.group(1) if hw else "", published)
    sm = os.path.join(d, "dcgm-sm.txt")
    if os.path.exists(sm):
        text = open(sm).read().strip()
        if "not installed" in text:
            lines += ["SM activity: " + text, ""]
        else:
            lines += ["SM activity (DCGM fields 1002 SM active, 1003 SM occupancy, one sample a second): dcgm-sm.txt", ""]
    tsv = os.path.join(d, "gpu-metrics.tsv")
    if os.path.exists(tsv):
        rows = []
        with open(tsv) as f:
            head = f.readline().rstrip("\n").split("\t")
            for line in f:
                rows.append(dict(zip(head, line.rstrip("\n").split("\t"))))
        lines += ["## NVML telemetry (`piccolo backend` /metrics, sampled each second)", ""]
        if not any(r.get("util") for r in rows):
            lines += ["No piccolo_gpu_* series: NVML found no GPU (see telemetry-backend.log).", ""]
        else:
            lines += ["| phase | samples | utilisation mean / max | memory used max GiB | power mean / max W |", "|---|---:|---:|---:|---:|"]
            for phase in dict.fromkeys(r["phase"] for r in rows):
                rs = [r for r in rows if r["phase"] == phase]
                u, m, p = stats(rs, "util"), stats(rs, "mem_used_bytes"), stats(rs, "power_w")
                lines.append("| %s | %d | %s | %s | %s |" % (
                    phase, len(rs), "%.0f%% / %.0f%%" % (100 * u[1], 100 * u[2]) if u else "-",
                    "%.2f" % (m[2] / 2**30) if m else "-", "%.0f / %.0f" % (p[1], p[2]) if p else "-"))
            lines.append("")
    lg = os.path.join(d, "loadgen.json")
    if os.path.exists(lg):
        r = json.load(open(lg))
        att = r.get("slo_attainment")
        lines += ["## Served through the gateway (`piccolo loadgen`, open loop, Poisson)", "",
                  "session %s at %.4g req/s for %.0f s: sent %d, ok %d, errors %s; SLO %s ms, attainment %s; "
                  "latency p50 %.1f ms, p99 %.1f ms, max %.1f ms; throughput %.1f req/s; late sends %d."
                  % (r["session"], r["rate_rps"], r["duration_s"], r["sent"], r["ok"], r.get("errors") or "none",
                     "%g" % r["slo_ms"] if r.get("slo_ms") is not None else "n/a",
                     "%.2f%%" % (100 * att) if att is not None else "n/a",
                     r["p50_ms"], r["p99_ms"], r["max_ms"], r["throughput_rps"], r["late_sends"]), ""]
        model = re.search(r"model:\s*([^,\s}]+)", open(os.path.join(d, "session.yaml")).read()).group(1)

        def counter(path, name):
            if not os.path.exists(path):
                return 0
            m = re.search(r'^%s\{model="%s"\} (\S+)$' % (name, re.escape(model)), open(path).read(), re.M)
            return float(m.group(1)) if m else 0

        before, after = os.path.join(d, "worker-metrics-before-serve.prom"), os.path.join(d, "worker-metrics.prom")
        b = counter(after, "piccolo_backend_batches_total") - counter(before, "piccolo_backend_batches_total")
        n = counter(after, "piccolo_backend_items_total") - counter(before, "piccolo_backend_items_total")
        if b > 0:
            lines += ["While serving, the worker ran %d items of %s in %d batches (%.1f items a batch)." % (n, model, b, n / b), ""]
        plan = os.path.join(d, "plan.txt")
        if os.path.exists(plan):
            lines += ["Plan (`piccolo plan`):", "", "```", open(plan).read().strip(), "```", ""]
    skipped = sorted(glob.glob(os.path.join(d, "*.skipped")))
    for s in skipped:
        lines += ["Skipped: %s: %s" % (os.path.basename(s)[:-8], open(s).read().strip())]
    with open(os.path.join(d, "summary.md"), "w") as f:
        f.write("\n".join(lines).rstrip() + "\n")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "free-port":
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])
        s.close()
    elif cmd == "wait-line":
        path, text, secs = args[0], args[1], float(args[2])
        deadline = time.monotonic() + secs
        while time.monotonic() < deadline:
            try:
                for line in open(path):
                    if text in line:
                        print(line.rstrip("\n"))
                        return
            except OSError:
                pass
            time.sleep(0.2)
        sys.exit("gpu-check: no line with %r in %s within %gs" % (text, path, secs))
    elif cmd == "fetch":
        sys.stdout.write(fetch(args[0]))
    elif cmd == "sample":
        cmd_sample(args[0], args[1], args[2], float(args[3]))
    elif cmd == "session":
        cmd_session(*args)
    elif cmd == "jpeg":
        cmd_jpeg(args[0], args[1])
    elif cmd == "summary":
        cmd_summary(*args[:2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
