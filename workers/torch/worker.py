#!/usr/bin/python3
"""piccolo torch worker: torchvision models behind the KServe v2 gRPC protocol.

It answers what a gateway and `piccolo profile` call on a `piccolo backend`
(backends/client.go, backends/server.go), with the same contract:

  ServerLive, ServerReady     true; ServerReady false from the drain on
  ModelReady                 loaded or not (not an error when not)
  ServerMetadata             name piccolo-torch, extension model_repository
  ModelMetadata              the loaded model's input and outputs (zoo.py);
                             NOT_FOUND unknown, FAILED_PRECONDITION not loaded
  RepositoryIndex            every model it can load, READY or UNAVAILABLE
  RepositoryModelLoad        parameters "batch" (max batch) and "concurrency"
                             (lanes: batches running at once), each an
                             int64_param or a decimal string_param in 1..2^31-1;
                             anything else is INVALID_ARGUMENT
  RepositoryModelUnload      NOT_FOUND when the model is unknown
  ModelInfer                 one batch, stacked on dimension 0, as
                             raw_input_contents (or fp32_contents, or
                             bytes_contents for encoded images); answers
                             raw_output_contents and the parameters
                             piccolo_queue_ns (the wait for a lane) and
                             piccolo_compute_ns (the model's run), int64 ns.
                             INVALID_ARGUMENT names the bad tensor, a batch
                             over the loaded max batch, or the item whose
                             image is not a JPEG or PNG within the limits
                             (zoo.image_header) or does not decode
  grpc.health.v1.Health      services "" and inference.GRPCInferenceService:
                             NOT_SERVING until the --models are loaded, SERVING,
                             NOT_SERVING from the drain on

Threads: gRPC runs each call on a pool thread. Loads and unloads take one lock
and publish a new models dict (never mutated after); ModelInfer reads the dict
without a lock, then waits for one of the model's lanes (zoo.Lane: a thread of
its own with, on a GPU, a CUDA stream of its own) and runs the batch on the
lane's thread, so at most "concurrency" batches of a model run at once, as on a
`piccolo backend`, and a lane's warm-up holds for its batches (zoo's doc).

Metrics (Prometheus text at /metrics on --metrics-listen) use the names
`piccolo backend` uses: piccolo_backend_batches_total, _items_total,
_errors_total{code}, _batch_seconds, _model_max_batch, _model_concurrency.

With --consul it registers as service piccolo-backend, as `piccolo backend
--consul` does (backends/membership): tag and meta hardware, price, gpu,
gpu_memory, models; a TCP check of the gRPC port every second; re-registered
when the agent loses it; deregistered on SIGINT/SIGTERM before the drain.

Usage: worker.py --hardware NAME [--listen 127.0.0.1:9101] [--models m,...]
       [--device auto|cpu|cuda] [--consul HOST:PORT]   (see --help)
"""

import argparse
import json
import os
import queue
import signal
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = [os.path.join(HERE, "..", "..", "api", "inference", "grpc_service.proto"), os.path.join(HERE, "proto", "health.proto")]


def import_stubs():
    """Imports the committed stubs (gen/, written by scripts/gen-proto.sh).
    Should this machine's protobuf runtime refuse them (a future major
    version), or PICCOLO_TORCH_REGEN_STUBS=1 ask for it, they are generated
    afresh from the .proto files into a temporary folder with grpc_tools, when
    it is installed."""
    sys.path.insert(0, os.path.join(HERE, "gen"))  # the stubs import each other by bare name
    try:
        if os.environ.get("PICCOLO_TORCH_REGEN_STUBS") == "1":
            raise ImportError("PICCOLO_TORCH_REGEN_STUBS=1")
        import grpc_service_pb2, grpc_service_pb2_grpc, health_pb2, health_pb2_grpc  # noqa: E401
    except Exception as e:  # noqa: BLE001 - any failure of the committed stubs
        sys.path.pop(0)
        for name in ("grpc_service_pb2", "grpc_service_pb2_grpc", "health_pb2", "health_pb2_grpc"):
            sys.modules.pop(name, None)
        try:
            from grpc_tools import protoc
        except ImportError:
            raise SystemExit("the stubs in %s/gen do not load (%s: %s), and grpc_tools is not installed to "
                             "generate them: run scripts/gen-proto.sh" % (HERE, type(e).__name__, e)) from None
        import tempfile
        gen = tempfile.mkdtemp(prefix="piccolo-torch-stubs-")
        for proto in PROTOS:
            if protoc.main(["protoc", "-I" + os.path.dirname(proto), "--python_out=" + gen, "--grpc_python_out=" + gen, proto]) != 0:
                raise SystemExit("generating the stubs of %s with grpc_tools failed" % proto)
        print("piccolo torch worker: the committed stubs do not load (%s); using stubs generated in %s" % (e, gen), file=sys.stderr)
        sys.path.insert(0, gen)
        import grpc_service_pb2, grpc_service_pb2_grpc, health_pb2, health_pb2_grpc  # noqa: E401
    return grpc_service_pb2, grpc_service_pb2_grpc, health_pb2, health_pb2_grpc


pb, pb_grpc, health_pb2, health_pb2_grpc = import_stubs()
sys.path.insert(0, HERE)
import zoo  # noqa: E402

MAX_MESSAGE_BYTES = 256 << 20  # backends.MaxMessageBytes: a stacked batch of images
PARAM_BATCH, PARAM_CONCURRENCY = "batch", "concurrency"  # backends.ParamBatch, ParamConcurrency
HEALTH_SERVICE = "inference.GRPCInferenceService"  # backends.HealthService
SERVICE_NAME = "piccolo-backend"  # membership.ServiceName
METRICS_PORT_OFFSET = 1000  # as `piccolo backend --metrics-listen auto`: 9101 -> 10101
MAX_INT32 = 2**31 - 1
PARAM_QUEUE_NS = "piccolo_queue_ns"  # backends.ParamQueueNanos
PARAM_COMPUTE_NS = "piccolo_compute_ns"  # backends.ParamComputeNanos


class RequestError(Exception):
    """A call that fails with a gRPC status code and a message for the caller."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class Loaded:
    """One loaded model: its Net, max batch and lanes. Immutable once published."""

    def __init__(self, net, batch, concurrency, lanes):
        self.net, self.batch, self.concurrency = net, batch, concurrency
        self.lanes = queue.Queue()
        for lane in lanes:
            self.lanes.put(lane)


class Metrics:
    """The backend metrics of docs/observability.md, by model, in Prometheus text.
    One lock guards the counters: a Python worker's request already takes the
    GIL many times over, so a lock more is not what limits it."""

    BUCKETS = [0.001 * 2**i for i in range(14)]  # as backends.NewMetrics

    def __init__(self):
        self.lock = threading.Lock()
        self.batches, self.items, self.errors, self.hist, self.settings = {}, {}, {}, {}, {}

    def ok(self, model, n, seconds):
        with self.lock:
            self.batches[model] = self.batches.get(model, 0) + 1
            self.items[model] = self.items.get(model, 0) + n
            h = self.hist.setdefault(model, [[0] * len(self.BUCKETS), 0, 0.0])
            for i, b in enumerate(self.BUCKETS):
                if seconds <= b:
                    h[0][i] += 1
            h[1] += 1
            h[2] += seconds

    def failed(self, model, code):
        with self.lock:
            key = (model, code)
            self.errors[key] = self.errors.get(key, 0) + 1

    def loaded(self, model, batch, concurrency):
        with self.lock:
            if batch is None:
                self.settings.pop(model, None)
            else:
                self.settings[model] = (batch, concurrency)

    def text(self):
        def lbl(model, **extra):
            pairs = [("model", model)] + sorted(extra.items())
            return "{" + ",".join('%s="%s"' % (k, str(v).replace('"', '\\"')) for k, v in pairs) + "}"

        out = []
        with self.lock:
            out.append("# TYPE piccolo_backend_batches_total counter")
            out += ["piccolo_backend_batches_total%s %d" % (lbl(m), v) for m, v in sorted(self.batches.items())]
            out.append("# TYPE piccolo_backend_items_total counter")
            out += ["piccolo_backend_items_total%s %d" % (lbl(m), v) for m, v in sorted(self.items.items())]
            out.append("# TYPE piccolo_backend_errors_total counter")
            out += ["piccolo_backend_errors_total%s %d" % (lbl(m, code=c), v) for (m, c), v in sorted(self.errors.items())]
            out.append("# TYPE piccolo_backend_batch_seconds histogram")
            for m, (counts, count, total) in sorted(self.hist.items()):
                for b, c in zip(self.BUCKETS, counts):
                    out.append("piccolo_backend_batch_seconds_bucket%s %d" % (lbl(m, le="%g" % b), c))
                out.append("piccolo_backend_batch_seconds_bucket%s %d" % (lbl(m, le="+Inf"), count))
                out.append("piccolo_backend_batch_seconds_sum%s %.9g" % (lbl(m), total))
                out.append("piccolo_backend_batch_seconds_count%s %d" % (lbl(m), count))
            out.append("# TYPE piccolo_backend_model_max_batch gauge")
            out += ["piccolo_backend_model_max_batch%s %d" % (lbl(m), b) for m, (b, _) in sorted(self.settings.items())]
            out.append("# TYPE piccolo_backend_model_concurrency gauge")
            out += ["piccolo_backend_model_concurrency%s %d" % (lbl(m), c) for m, (_, c) in sorted(self.settings.items())]
        return "\n".join(out) + "\n"


class Worker(pb_grpc.GRPCInferenceServiceServicer):
    """The KServe v2 service over the models of zoo.MODELS on one device."""

    def __init__(self, device, image_size, fp16, default_batch, metrics, log):
        self.device, self.image_size, self.fp16 = device, image_size, fp16  # fp16: "auto", "on" or "off"
        self.default_batch = default_batch
        self.metrics, self.log = metrics, log
        self.models = {}  # name -> Loaded; replaced under load_lock, never mutated
        self.nets = {}  # name -> zoo.Net, kept across reloads (the weights are random anyway)
        self.lanes = {}  # name -> [zoo.Lane], grown to the largest concurrency loaded, kept across reloads
        self.load_lock = threading.Lock()
        self.draining = False

    # --- loading -----------------------------------------------------------

    def load(self, name, batch, concurrency):
        """Loads (or reloads with new settings) name with max batch and lanes;
        0 means the default (--default-batch, 1 lane)."""
        if name not in zoo.MODELS:
            raise RequestError(grpc.StatusCode.NOT_FOUND, self._unknown(name))
        batch = batch or self.default_batch
        concurrency = concurrency or 1
        with self.load_lock:
            lanes = self.lanes.setdefault(name, [])
            while len(lanes) < concurrency:
                lanes.append(zoo.Lane(self.device, "%s-lane-%d" % (name, len(lanes))))
            lanes = lanes[:concurrency]
            net = self.nets.get(name)
            if net is None:
                t0 = time.monotonic()
                half = self.fp16 == "on" or (self.fp16 == "auto" and self.device.type == "cuda" and zoo.half_by_default(name))
                net, fp16_error = zoo.build(name, self.device, self.image_size, half, lanes[0])
                if fp16_error is not None:
                    self.log("model %s: fp16 failed (%s); running it in fp32" % (name, fp16_error))
                self.log("model %s built on %s (%s, input %s) in %.1fs"
                         % (name, self.device, "fp16" if net.fp16 else "fp32", net.inputs[0][2], time.monotonic() - t0))
                self.nets[name] = net
            if self.device.type == "cuda":
                # Every batch size the gateway may send, once on every lane:
                # CUDA's lazy set-up and cuDNN's plan choice per shape and
                # thread happen here, not on a request (zoo's doc).
                t0 = time.monotonic()
                net.warm(range(1, batch + 1), lanes)
                self.log("model %s warmed at batches 1..%d on %d lanes in %.1fs" % (name, batch, concurrency, time.monotonic() - t0))
            nxt = dict(self.models)
            nxt[name] = Loaded(net, batch, concurrency, lanes)
            self.models = nxt
            self.metrics.loaded(name, batch, concurrency)
        self.log("model loaded: %s batch %d concurrency %d" % (name, batch, concurrency))

    def unload(self, name):
        if name not in zoo.MODELS:
            raise RequestError(grpc.StatusCode.NOT_FOUND, self._unknown(name))
        with self.load_lock:
            if name in self.models:
                nxt = dict(self.models)
                del nxt[name]
                self.models = nxt
                self.metrics.loaded(name, None, None)
                self.log("model unloaded: %s" % name)

    def _unknown(self, name):
        return "model %r: unknown model on this backend; it can load: %s" % (name, ", ".join(sorted(zoo.MODELS)))

    def _lookup(self, name):
        m = self.models.get(name)
        if m is not None:
            return m
        if name in zoo.MODELS:
            raise RequestError(grpc.StatusCode.FAILED_PRECONDITION,
                               "model %r: model not loaded: load it with RepositoryModelLoad first" % name)
        raise RequestError(grpc.StatusCode.NOT_FOUND, self._unknown(name))

    # --- the KServe v2 service ---------------------------------------------

    def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=not self.draining)

    def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=request.name in self.models)

    def ServerMetadata(self, request, context):
        return pb.ServerMetadataResponse(name="piccolo-torch", version="torch-" + torch.__version__,
                                         extensions=["model_repository"])

    def ModelMetadata(self, request, context):
        try:
            m = self._lookup(request.name)
        except RequestError as e:
            context.abort(e.code, str(e))
        net = m.net
        meta = pb.ModelMetadataResponse(name=request.name, versions=["1"], platform="pytorch_torchvision")
        for name, dt, shape in net.inputs:
            meta.inputs.add(name=name, datatype=dt, shape=shape)
        for name, dt, shape in net.outputs:
            meta.outputs.add(name=name, datatype=dt, shape=shape)
        return meta

    def RepositoryIndex(self, request, context):
        resp = pb.RepositoryIndexResponse()
        for name in sorted(zoo.MODELS):
            if name in self.models:
                resp.models.add(name=name, version="1", state="READY")
            elif not request.ready:
                resp.models.add(name=name, version="1", state="UNAVAILABLE", reason="unloaded")
        return resp

    def RepositoryModelLoad(self, request, context):
        values = {PARAM_BATCH: 0, PARAM_CONCURRENCY: 0}
        for key, p in request.parameters.items():
            if key not in values:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "model %r: load parameter %r is not supported; allowed: %s, %s"
                              % (request.model_name, key, PARAM_BATCH, PARAM_CONCURRENCY))
            try:
                values[key] = int_param(p)
            except ValueError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "model %r: load parameter %r: %s" % (request.model_name, key, e))
        try:
            self.load(request.model_name, values[PARAM_BATCH], values[PARAM_CONCURRENCY])
        except RequestError as e:
            context.abort(e.code, str(e))
        except Exception as e:  # noqa: BLE001 - out of memory, a torchvision error: the caller gets it
            context.abort(grpc.StatusCode.INTERNAL, "load model %r: %s: %s" % (request.model_name, type(e).__name__, e))
        return pb.RepositoryModelLoadResponse()

    def RepositoryModelUnload(self, request, context):
        for key in request.parameters:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "model %r: unload parameter %r is not supported; none are" % (request.model_name, key))
        try:
            self.unload(request.model_name)
        except RequestError as e:
            context.abort(e.code, str(e))
        return pb.RepositoryModelUnloadResponse()

    def ModelInfer(self, request, context):
        model, n = request.model_name, 0
        try:
            m = self._lookup(model)
            raw, n = request_input(m, request)
            want = [o.name for o in request.outputs]
            names = [o[0] for o in m.net.outputs]
            for w in want:
                if w not in names:
                    raise RequestError(grpc.StatusCode.INVALID_ARGUMENT, "model %r: requested output %r is not an output of the model; its outputs: %s"
                                       % (model, w, ", ".join(names)))
            start = time.monotonic()
            lane = m.lanes.get()
            ran = time.monotonic()
            try:
                outputs = m.net.run(raw, n, lane)
            finally:
                m.lanes.put(lane)
            end = time.monotonic()
            seconds = end - start
        except zoo.BadImage as e:  # an image that passed its header check but does not decode
            e = RequestError(grpc.StatusCode.INVALID_ARGUMENT, "model %r: invalid input: input %r: %s" % (model, m.net.inputs[0][0], e))
            self.metrics.failed(model, code_name(e.code))
            context.abort(e.code, str(e))
        except RequestError as e:
            if model in self.models:
                self.metrics.failed(model, code_name(e.code))
            context.abort(e.code, str(e))
        except Exception as e:  # noqa: BLE001 - the model failed: INTERNAL, and the worker goes on
            self.metrics.failed(model, "Internal")
            context.abort(grpc.StatusCode.INTERNAL, "model %r: batch of %d: %s: %s" % (model, n, type(e).__name__, e))
        resp = pb.ModelInferResponse(model_name=model, model_version="1", id=request.id)
        # The batch's time here, as the Go backend reports it (backends/timing.go):
        # the wait for a lane apart from the model's run, so the gateway learns the
        # device from the device and not from its own round trip.
        resp.parameters[PARAM_QUEUE_NS].int64_param = max(int((ran - start) * 1e9), 0)
        resp.parameters[PARAM_COMPUTE_NS].int64_param = max(int((end - ran) * 1e9), 1)
        for name, dt, shape, data in outputs:
            if want and name not in want:
                continue
            resp.outputs.add(name=name, datatype=dt, shape=shape)
            resp.raw_output_contents.append(data)
        self.metrics.ok(model, n, seconds)
        return resp


def int_param(p):
    """A load parameter's value: an int64_param or a decimal string_param, 1..2^31-1."""
    which = p.WhichOneof("parameter_choice")
    if which == "int64_param":
        v = p.int64_param
    elif which == "string_param":
        try:
            v = int(p.string_param.strip())
        except ValueError:
            raise ValueError("%r is not a whole number" % p.string_param) from None
    else:
        raise ValueError("want an int64_param or a decimal string_param")
    if v < 1 or v > MAX_INT32:
        raise ValueError("%d is out of range; want 1 to %d" % (v, MAX_INT32))
    return v


def request_input(m, request):
    """Checks the request's one input against the loaded model and returns its
    data and the batch size n: the raw FP32 bytes, or for a model that takes
    encoded images (input BYTES [n]) the n images, each one's header checked
    (zoo.split_images)."""
    net, model = m.net, request.model_name
    bad = lambda msg: RequestError(grpc.StatusCode.INVALID_ARGUMENT, "model %r: invalid input: %s" % (model, msg))  # noqa: E731
    name, dt, shape = net.inputs[0]
    if len(request.inputs) != 1:
        raise bad("%d inputs; the model has one, %r %s %s" % (len(request.inputs), name, dt, shape))
    t = request.inputs[0]
    if t.name != name:
        raise bad("input %r is not an input of the model; its inputs: %s" % (t.name, name))
    if t.datatype != dt:
        raise bad("input %r: datatype %s; the model wants %s" % (t.name, t.datatype, dt))
    got = list(t.shape)
    if len(got) != len(shape) or any(s >= 0 and g != s for g, s in zip(got[1:], shape[1:])):
        raise bad("input %r: shape %s; the model wants %s (-1: any)" % (t.name, got, shape))
    n = got[0]
    if n < 1:
        raise bad("batch of %d items; want at least 1 in dimension 0" % n)
    if n > m.batch:
        raise bad("batch of %d items exceeds the loaded max batch %d" % (n, m.batch))
    if len(request.raw_input_contents) > 1:
        raise bad("%d raw_input_contents for one input" % len(request.raw_input_contents))
    if request.raw_input_contents and t.HasField("contents"):
        raise bad("input %r has both contents and raw_input_contents; send one" % t.name)
    if dt == "BYTES":
        if request.raw_input_contents:
            raw = request.raw_input_contents[0]
        elif t.contents.bytes_contents:
            c = t.contents.bytes_contents
            raw = b"".join(struct.pack("<I", len(b)) + b for b in c)
        else:
            raise bad("input %r has no data (neither raw_input_contents nor contents.bytes_contents)" % t.name)
        try:
            return zoo.split_images(raw, n), n
        except zoo.BadImage as e:
            raise bad("input %r: %s" % (t.name, e)) from None
    if request.raw_input_contents:
        raw = request.raw_input_contents[0]
    elif dt == "FP32" and t.contents.fp32_contents:
        raw = torch.tensor(t.contents.fp32_contents, dtype=torch.float32).numpy().tobytes()
    elif dt == "UINT8" and t.contents.uint_contents:
        v = torch.tensor(t.contents.uint_contents, dtype=torch.int64)
        if int(v.max()) > 255:
            raise bad("input %r: uint_contents holds %d; UINT8 is 0 to 255" % (t.name, int(v.max())))
        raw = v.to(torch.uint8).numpy().tobytes()
    else:
        raise bad("input %r has no data (neither raw_input_contents nor contents.%s)" % (t.name, "fp32_contents" if dt == "FP32" else "uint_contents"))
    if len(raw) != n * net.row_bytes:
        raise bad("input %r: %d bytes; shape %s of %s is %d" % (t.name, len(raw), got, dt, n * net.row_bytes))
    return raw, n


def code_name(code):
    """The gRPC code as Go's codes.Code.String() spells it (the errors metric's label)."""
    return "".join(w.capitalize() for w in code.name.split("_")).replace("Ok", "OK")


class Health(health_pb2_grpc.HealthServicer):
    """grpc.health.v1 for "" and HEALTH_SERVICE: NOT_SERVING, SERVING, then
    NOT_SERVING for good from the drain on."""

    SERVICES = ("", HEALTH_SERVICE)

    def __init__(self):
        self.status = health_pb2.HealthCheckResponse.NOT_SERVING
        self.changed = threading.Condition()

    def set(self, status):
        with self.changed:
            self.status = status
            self.changed.notify_all()

    def Check(self, request, context):
        if request.service not in self.SERVICES:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service %r; known: \"\", %s" % (request.service, HEALTH_SERVICE))
        return health_pb2.HealthCheckResponse(status=self.status)

    def Watch(self, request, context):
        if request.service not in self.SERVICES:
            yield health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVICE_UNKNOWN)
            return
        last = None
        while context.is_active():
            with self.changed:
                if self.status == last:
                    self.changed.wait(timeout=0.5)
                status = self.status
            if status != last:
                last = status
                yield health_pb2.HealthCheckResponse(status=status)


class Consul:
    """The worker's registration with a Consul agent (HTTP API), as
    backends/membership.RegisterWith makes it: registered passing once serving,
    re-registered critical (shown again once its check passes) whenever the
    agent no longer holds it, deregistered on shutdown."""

    def __init__(self, agent, reg, log):
        self.base = "http://" + agent
        self.reg, self.log = reg, log
        self.stop = threading.Event()
        self.thread = None

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status

    def register(self):
        self._call("PUT", "/v1/agent/service/register?replace-existing-checks=true", self.reg)
        self.thread = threading.Thread(target=self._keep, daemon=True)
        self.thread.start()

    def _keep(self):
        again = json.loads(json.dumps(self.reg))
        again["Check"]["Status"] = "critical"
        lost = False
        while not self.stop.wait(2):
            try:
                self._call("GET", "/v1/agent/service/" + self.reg["ID"])
                lost = False
            except urllib.error.HTTPError as e:
                if e.code != 404:
                    continue
                if not lost:
                    self.log("consul: the agent lost registration %s; registering again" % self.reg["ID"])
                    lost = True
                try:
                    self._call("PUT", "/v1/agent/service/register?replace-existing-checks=true", again)
                except OSError as e2:
                    self.log("consul: registering again failed: %s" % e2)
            except OSError:
                pass  # the agent is down: try again next round

    def deregister(self):
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
        try:
            self._call("PUT", "/v1/agent/service/deregister/" + self.reg["ID"])
            self.log("deregistered from consul: %s" % self.reg["ID"])
        except OSError as e:
            self.log("consul deregistration failed; the agent drops this backend when its check fails: %s" % e)


def registration(args, addr, device, models):
    """The Consul service registration of membership.RegisterWith for this worker."""
    host, port = addr.rsplit(":", 1)
    host = host.strip("[]")
    rid = args.id or ("%s-%s-%s" % (args.hardware, host, port)).replace(":", "-")
    meta = {"hardware": args.hardware, "price": "%g" % args.price, "models": ",".join(sorted(models))}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        meta["gpu"], meta["gpu_memory"] = props.name, str(props.total_memory)
    check_host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return {
        "ID": rid, "Name": SERVICE_NAME, "Address": "" if host in ("", "0.0.0.0", "::") else host, "Port": int(port),
        "Tags": [args.hardware], "Meta": meta,
        "Check": {"Name": "gRPC port accepts connections", "TCP": "%s:%s" % (check_host, port), "Interval": "1s",
                  "Timeout": "1s", "DeregisterCriticalServiceAfter": "1m0s", "Status": "passing"},
    }


def metrics_addr(flag, grpc_addr):
    """--metrics-listen: off/"" none, auto the gRPC host at port + 1000 (0 stays 0), else as given."""
    if flag in ("", "off"):
        return None
    if flag != "auto":
        return flag
    host, port = grpc_addr.rsplit(":", 1)
    p = int(port)
    return "%s:%d" % (host, p + METRICS_PORT_OFFSET if p else 0)


def serve_metrics(addr, metrics):
    host, port = addr.rsplit(":", 1)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            body = metrics.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer((host.strip("[]"), int(port)), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def pick_device(flag):
    if flag == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if flag == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch %s sees no CUDA device" % torch.__version__)
    if flag not in ("cpu", "cuda"):
        raise SystemExit("--device %r: allowed: auto, cpu, cuda" % flag)
    return torch.device(flag)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Models: " + ", ".join(sorted(zoo.MODELS)) + ". See docs/gpu.md.")
    ap.add_argument("--listen", default="127.0.0.1:9101", help="gRPC host:port (port 0: any free port)")
    ap.add_argument("--hardware", required=True, help="hardware type this worker is, as the config's profiles name it (e.g. h100)")
    ap.add_argument("--models", default="", help="models to load at start, comma-separated (default batch, 1 lane)")
    ap.add_argument("--device", default="auto", help="auto (cuda when torch sees a GPU, else cpu), cpu or cuda")
    ap.add_argument("--fp16", default="auto", help="auto (on with cuda for the models where it pays: resnet50), on or off: run the models in half precision")
    ap.add_argument("--image-size", type=int, default=0, help="H = W of every model's input (default: each model's own, 224 or 320)")
    ap.add_argument("--default-batch", type=int, default=8, help="max batch of a load that names none")
    ap.add_argument("--threads", type=int, default=0, help="CPU: torch intra-op threads (default: torch's own)")
    ap.add_argument("--decode-threads", type=int, default=0, help="threads that decode images on the CPU (default: min(4, CPUs))")
    ap.add_argument("--grpc-threads", type=int, default=64, help="gRPC call threads (calls beyond the lanes wait for one)")
    ap.add_argument("--metrics-listen", default="auto", help="/metrics host:port; auto: the gRPC port + 1000; off: none")
    ap.add_argument("--consul", default="", help="register with the Consul agent at this host:port as service " + SERVICE_NAME)
    ap.add_argument("--id", default="", help="with --consul: the registration id (default <hardware>-<host>-<port>)")
    ap.add_argument("--price", type=float, default=0, help="with --consul: the price meta (cost units per machine-hour)")
    ap.add_argument("--drain", type=float, default=10, help="on SIGINT/SIGTERM, seconds to let batches in flight finish")
    args = ap.parse_args(argv)

    log = lambda msg: print("piccolo torch worker: " + msg, file=sys.stderr, flush=True)  # noqa: E731
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if unknown := zoo.check_names(models):
        ap.error("--models: unknown %s; allowed: %s" % (", ".join(unknown), ", ".join(sorted(zoo.MODELS))))
    if args.default_batch < 1 or args.image_size < 0 or args.threads < 0 or args.decode_threads < 0 or args.grpc_threads < 1 or args.price < 0:
        ap.error("--default-batch and --grpc-threads must be >= 1; --image-size, --threads, --decode-threads and --price >= 0")
    if args.id and not args.consul:
        ap.error("--id is only used with --consul: it names the Consul registration")
    if args.fp16 not in ("auto", "on", "off"):
        ap.error("--fp16 %r: allowed: auto, on, off" % args.fp16)
    device = pick_device(args.device)
    if args.fp16 == "on" and device.type != "cuda":
        ap.error("--fp16 on needs --device cuda (half precision on the CPU is slower, when it runs at all)")
    if args.threads:
        torch.set_num_threads(args.threads)
    zoo.configure_decode(args.decode_threads)
    if device.type == "cuda":
        log("GPU %s, torch %s, CUDA %s" % (torch.cuda.get_device_name(device), torch.__version__, torch.version.cuda))

    metrics = Metrics()
    worker = Worker(device, args.image_size, args.fp16, args.default_batch, metrics, log)
    for m in models:
        worker.load(m, 0, 0)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.grpc_threads), options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        # The Go client pings an idle connection every 30 s (backends.ClientOptions).
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 5000),
        ("grpc.http2.max_ping_strikes", 0),
    ])
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(worker, server)
    health = Health()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = server.add_insecure_port(args.listen)
    if port == 0:
        raise SystemExit("--listen %s: cannot listen there" % args.listen)
    addr = "%s:%d" % (args.listen.rsplit(":", 1)[0], port)
    server.start()
    maddr = metrics_addr(args.metrics_listen, addr)
    msrv, murl = None, "off"
    if maddr:
        msrv = serve_metrics(maddr, metrics)
        murl = "http://%s:%d/metrics" % (maddr.rsplit(":", 1)[0], msrv.server_address[1])
    consul = None
    if args.consul:
        consul = Consul(args.consul, registration(args, addr, device, zoo.MODELS), log)
        try:
            consul.register()
        except OSError as e:
            server.stop(0)
            raise SystemExit("--consul %s: registering with the agent failed: %s" % (args.consul, e))
        log("registered with consul %s as %s" % (args.consul, consul.reg["ID"]))
    health.set(health_pb2.HealthCheckResponse.SERVING)
    # One line on stdout, read by tests and scripts/gpu-check.sh.
    print("piccolo torch worker: device %s, hardware %s, serving on %s, metrics %s" % (device, args.hardware, addr, murl), flush=True)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    if consul is not None:
        consul.deregister()  # gateways stop sending before the drain
    log("draining (up to %gs)" % args.drain)
    worker.draining = True
    health.set(health_pb2.HealthCheckResponse.NOT_SERVING)
    server.stop(args.drain).wait()
    if msrv is not None:
        msrv.shutdown()
    log("stopped")


if __name__ == "__main__":
    main()
