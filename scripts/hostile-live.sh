#!/usr/bin/env bash
# hostile-live.sh tries the hostile clients of docs/security.md against a
# live gateway from outside (HTTP, a short Python client) and prints, per
# case, what the gateway answered, that it still answers a normal request,
# and its RSS (peak growth for the gzip bombs). It builds piccolo, starts
# one sim backend and a gateway on loopback serving configs/demo/paper-gpus.yaml
# (session paper-chain), runs the cases one after another and stops both.
#
# Usage: scripts/hostile-live.sh            (run it alone: RSS and timings
#        are the machine's; the gateway runs with its default limits)
#
# Cases: 100,000 empty inputs; output0 asked for 200,000 times; eight
# concurrent gzip bodies inflating to a declared FP64 [32,000,000] (256 MB)
# tensor (peak RSS growth, want <= 300 MB); 1,000 connections holding
# half-sent requests (a normal request's latency, want < 100 ms; the
# half-sent ones closed after --header-timeout); 2,000 randomly mutated
# bodies over keep-alive (no 5xx, no dropped connection).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$dir"' EXIT
go build -o "$dir/piccolo" ./cmd/piccolo
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
bport=$(port) hport=$(port) gport=$(port) aport=$(port)
cp configs/demo/paper-gpus.yaml "$dir/cfg.yaml"
"$dir/piccolo" backend --listen "127.0.0.1:$bport" --hardware v100 -c "$dir/cfg.yaml" --executor sim --metrics-listen off >"$dir/backend.log" 2>&1 &
pids+=($!)
until grep -q '"backend serving"' "$dir/backend.log"; do sleep 0.05; done
printf 'backends:\n  - {id: b1, address: "127.0.0.1:%d", hardware: v100}\n' "$bport" >"$dir/backends.yaml"
"$dir/piccolo" gateway -c "$dir/cfg.yaml" -c "$dir/backends.yaml" --listen "127.0.0.1:$hport" --grpc-listen "127.0.0.1:$gport" --admin-listen "127.0.0.1:$aport" \
	--watch=false --header-timeout "${HEADER_TIMEOUT:-10s}" >"$dir/gateway.log" 2>&1 &
gpid=$!
pids+=($gpid)
until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hport/v2/health/ready")" = 200 ]; do
	kill -0 "$gpid" 2>/dev/null || { cat "$dir/gateway.log" >&2; exit 1; }
	sleep 0.05
done
echo "gateway pid $gpid: client 127.0.0.1:$hport, admin 127.0.0.1:$aport"
echo "== planes apart: GET /metrics on the client port $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hport/metrics"), on the admin listener $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$aport/metrics"); /admin/plan on the client port $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$hport/admin/plan")"
echo "== unknown session: $(curl -s -X POST -d '{}' "http://127.0.0.1:$hport/v2/models/nope/infer")"
python3 - "$hport" "$gpid" "${HEADER_TIMEOUT:-10s}" <<'PY'
import gzip, http.client, json, os, random, socket, sys, threading, time
port, pid, htimeout = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
PATH = "/v2/models/paper-chain/infer"
GOOD = json.dumps({"inputs": [{"name": "input0", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}).encode()

def rss_mb():
    with open(f"/proc/{pid}/status") as f:
        for l in f:
            if l.startswith("VmRSS:"):
                return int(l.split()[1]) / 1024
    return 0.0

def post(body, headers=None, conn=None, timeout=120):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", PATH, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    if conn is None:
        c.close()
    return r.status, data, r.getheader("Retry-After")

def alive(label):
    t = time.time()
    st, body, _ = post(GOOD)
    ms = (time.time() - t) * 1000
    print(f"  {label}: normal request {st} in {ms:.1f} ms; RSS {rss_mb():.0f} MB")
    return st, ms

def case(name, fn):
    print(f"== {name}")
    t = time.time()
    fn()
    print(f"  took {time.time() - t:.1f} s")
    alive("after")

def many_inputs():
    body = json.dumps({"inputs": [{"name": "", "shape": [0], "datatype": "FP32", "data": []} for _ in range(100_000)]}).encode()
    st, b, _ = post(body)
    print(f"  100,000 empty inputs ({len(body)} bytes): {st} {b[:120]!r}")
    body = json.dumps({"inputs": [{"name": f"x{i}", "shape": [0], "datatype": "FP32", "data": []} for i in range(100_000)]}).encode()
    st, b, _ = post(body)
    print(f"  100,000 named inputs ({len(body)} bytes): {st} {b[:120]!r}")

def dup_outputs():
    body = json.dumps({"inputs": json.loads(GOOD)["inputs"], "outputs": [{"name": "output0"}] * 200_000}).encode()
    st, b, _ = post(body)
    print(f"  output0 x 200,000 ({len(body)} bytes): {st}, {len(b)} bytes back: {b[:120]!r}")

def bombs():
    n = 32_000_000
    head = b'{"inputs":[{"name":"input0","datatype":"FP64","shape":[%d],"data":[' % n
    # 0, repeated up to just under --max-body (64 MiB), never closed: a body
    # that declares 256 MB and inflates to 64 MB.
    raw = head + b"0," * ((64 << 20) // 2 - len(head) - 8)
    z = gzip.compress(raw, 9)
    print(f"  each bomb: {len(z)} bytes gzip, {len(raw)} bytes inflated, declares FP64 [{n}] = {n*8>>20} MiB")
    base = rss_mb()
    peak = [base]
    stop = threading.Event()
    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mb())
            time.sleep(0.005)
    w = threading.Thread(target=watch); w.start()
    res = [None] * 8
    def send(i):
        try:
            st, b, ra = post(z, {"Content-Encoding": "gzip", "Content-Type": "application/json"})
            res[i] = (st, ra, b[:100])
        except Exception as e:
            res[i] = ("error", None, str(e))
    ts = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    [t.start() for t in ts]; [t.join() for t in ts]
    stop.set(); w.join()
    for r in res:
        print(f"  bomb: {r[0]} Retry-After={r[1]} {r[2]!r}")
    print(f"  RSS before {base:.0f} MB, peak {peak[0]:.0f} MB: growth {peak[0]-base:.0f} MB (want <= 300); now {rss_mb():.0f} MB")

def half_sent():
    socks = []
    for _ in range(1000):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST " + PATH.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: appli")
        socks.append(s)
    lat = sorted(alive("with 1,000 half-sent open")[1] for _ in range(5))
    print(f"  normal request latencies with 1,000 half-sent open: median {lat[2]:.1f} ms, max {lat[-1]:.1f} ms (want within 100 ms of the 'start' line: the session's own time)")
    t = time.time()
    closed = 0
    for s in socks:
        s.settimeout(120)
        try:
            while s.recv(4096):
                pass
        except Exception:
            pass
        closed += 1
        s.close()
    print(f"  {closed} half-sent connections closed by the gateway {time.time()-t:.1f} s after the last request (header timeout {htimeout})")

def mutated():
    rnd = random.Random(1)
    seeds = [GOOD, json.dumps({"id": "q", "inputs": [{"name": "input0", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], [3, 4]]}],
             "outputs": [{"name": "output0"}], "parameters": {"priority": 1}}).encode()]
    codes = {}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    drops = 0
    for i in range(2000):
        b = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randint(1, 8)):
            op = rnd.randrange(3)
            p = rnd.randrange(len(b) + 1)
            if op == 0 and b:
                del b[min(p, len(b) - 1)]
            elif op == 1:
                b[p:p] = bytes([rnd.randrange(256)])
            elif b:
                b[min(p, len(b) - 1)] = rnd.choice(b'{}[],:"0123456789.-eE ntrufals\\')
        try:
            st, _, _ = post(bytes(b), {"Content-Type": "application/json"}, conn=c)
        except Exception:
            drops += 1
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            continue
        codes[st] = codes.get(st, 0) + 1
    fives = sum(v for k, v in codes.items() if k >= 500)
    print(f"  2,000 mutated bodies: statuses {dict(sorted(codes.items()))}; 5xx {fives}; dropped connections {drops}")

alive("start")
case("100,000 empty inputs", many_inputs)
case("a requested output 200,000 times", dup_outputs)
case("eight concurrent gzip bombs", bombs)
case("1,000 half-sent requests", half_sent)
case("2,000 mutated bodies over keep-alive", mutated)
PY
echo "gateway log: $(grep -c '"level":"error"' "$dir/gateway.log" || true) error lines; panics: $(grep -c 'panic recovered' "$dir/gateway.log" || true)"
