"""The torchvision models the worker serves, and how one batch runs on them.

Every model takes one input, "input": FP32 [n, 3, H, W] (RGB, any values: the
models are built with random weights, weights=None, so there is nothing to
normalise for; the timing of a batch does not depend on the weight values,
except the detector's box post-processing, see docs/gpu.md). H = W = the
model's image size: --image-size, else its own (224 for the classifiers, 320
for the detector).

Outputs, dimension 0 = n, one row per input row:
  classifiers (resnet50, mobilenet_v3_large, mobilenet_v3_small):
      logits FP32 [n, 1000]
  detector (ssdlite320_mobilenet_v3_large), padded to DETECTIONS per image:
      boxes FP32 [n, DETECTIONS, 4] (x1, y1, x2, y2, pixels), scores FP32
      [n, DETECTIONS] (0 in padding), labels INT64 [n, DETECTIONS] (0 in
      padding: COCO's background), count INT64 [n] (real detections).

A Net is used by several lanes at once: run() sends the batch to the lane's
own thread, where it runs on the lane's CUDA stream (none on the CPU). The
module itself is immutable after build().

Why a lane is a thread (measured on an H100, torch 2.11, cuDNN 9.19,
2026-11-26): PyTorch keeps cuDNN's execution plans per thread, so the first
batch of a shape on a thread that has not run that shape pays cuDNN's plan
choice again. For mobilenet_v3_large in fp16 (depthwise convolutions, whose
cuDNN kernels are compiled at run time) that was 1.4-4.0 s a (thread, shape),
against 5 ms once warm; resnet50 fp16 and fp32 models paid 90-110 ms. When
gRPC's pool threads ran the batches, the profile of mobilenet_v3_large
measured 1.5-3.1 s at most points (a point's few calls each on a new thread),
and a warm-up on one thread did not help the others. A lane's thread runs
every batch of that lane, so a warm-up on it holds.
"""

import queue
import threading
import warnings
from concurrent.futures import Future

import torch
import torchvision

# The detector's outputs are padded (or cut) to this many boxes per image:
# COCO's evaluation keeps 100 per image.
DETECTIONS = 100

# name -> (kind, builder, native image size, half): half says whether the
# worker's --fp16 auto runs the model in half precision on a GPU. The
# MobileNetV3 family (and the detector on its backbone) stays in fp32: on an
# H100 its fp16 depthwise convolutions go through cuDNN kernels compiled at run
# time (1.4-4.0 s for each new batch shape on each lane, so a warm-up of
# batches 1..64 took 104 s), and once warm a batch of 32 ran in 4.0 ms in fp32
# against 8.2 ms for a batch of 16 in fp16 (2026-11-26, docs/gpu.md).
MODELS = {
    "resnet50": ("classifier", lambda: torchvision.models.resnet50(weights=None), 224, True),
    "mobilenet_v3_large": ("classifier", lambda: torchvision.models.mobilenet_v3_large(weights=None), 224, False),
    "mobilenet_v3_small": ("classifier", lambda: torchvision.models.mobilenet_v3_small(weights=None), 224, False),
    "ssdlite320_mobilenet_v3_large": (
        "detector",
        lambda: torchvision.models.detection.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, detections_per_img=DETECTIONS),
        320,
        False,
    ),
}


def half_by_default(name):
    """Whether --fp16 auto runs name in half precision on a GPU (MODELS)."""
    return MODELS[name][3]


class Lane:
    """One lane of a loaded model: a thread of its own that runs the lane's
    batches one at a time and, on a GPU, a CUDA stream of its own (the module
    doc says why a thread). warmed holds the batch sizes this lane has run
    (cuDNN's plans are per thread, so per lane). Lanes live as long as the
    worker: a reload keeps a model's lanes and what they have warmed."""

    def __init__(self, device, name):
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.warmed = set()
        self._jobs = queue.SimpleQueue()
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self):
        while True:
            fn, args, f = self._jobs.get()
            try:
                f.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - the caller gets it
                f.set_exception(e)

    def submit(self, fn, *args):
        """Queues fn(*args) on the lane's thread; the Future holds its result or exception."""
        f = Future()
        self._jobs.put((fn, args, f))
        return f

    def call(self, fn, *args):
        """Runs fn(*args) on the lane's thread and returns its result (or raises its exception)."""
        return self.submit(fn, *args).result()

# torch.frombuffer warns that a request's bytes are read-only: the models never
# write to their input, so the warning says nothing.
warnings.filterwarnings("ignore", message="The given buffer is not writable")


class Net:
    """One built model on one device, fp16 or fp32, and its tensor specs."""

    def __init__(self, name, device, image_size, fp16):
        kind, build, native, _ = MODELS[name]
        self.name, self.kind, self.device = name, kind, device
        self.size = image_size or native
        self.fp16 = fp16
        with torch.inference_mode():
            m = build().eval().to(device)
            if fp16 and kind == "classifier":
                m = m.half()
        self.module = m
        self.input_shape = (3, self.size, self.size)
        self.row_bytes = 4 * 3 * self.size * self.size
        if kind == "classifier":
            self.outputs = [("logits", "FP32", [-1, 1000])]
        else:
            self.outputs = [
                ("boxes", "FP32", [-1, DETECTIONS, 4]),
                ("scores", "FP32", [-1, DETECTIONS]),
                ("labels", "INT64", [-1, DETECTIONS]),
                ("count", "INT64", [-1]),
            ]
        self.inputs = [("input", "FP32", [-1, 3, self.size, self.size])]

    def run(self, raw, n, lane):
        """Runs one batch of n rows given as raw little-endian FP32 bytes on
        lane (a Lane: its thread, on its stream) and returns the outputs as
        (name, datatype, shape, bytes) tuples, in self.outputs' order."""
        return lane.call(self._run_here, raw, n, lane.stream)

    def _run_here(self, raw, n, stream):
        x = torch.frombuffer(raw, dtype=torch.float32).view(n, *self.input_shape)
        with torch.inference_mode():
            if stream is None:
                return self._forward(x, n)
            with torch.cuda.stream(stream):
                x = x.to(self.device, non_blocking=False)
                out = self._forward(x, n)
            stream.synchronize()
            return out

    def _forward(self, x, n):
        if self.kind == "classifier":
            if self.fp16:
                x = x.half()
            y = self.module(x).float().cpu()
            return [("logits", "FP32", [n, 1000], y.numpy().tobytes())]
        if self.fp16:
            with torch.autocast(device_type="cuda", dtype=torch.float16):
                dets = self.module(x)
        else:
            dets = self.module(x)
        boxes = torch.zeros(n, DETECTIONS, 4)
        scores = torch.zeros(n, DETECTIONS)
        labels = torch.zeros(n, DETECTIONS, dtype=torch.int64)
        count = torch.zeros(n, dtype=torch.int64)
        for i, d in enumerate(dets):
            k = min(DETECTIONS, d["boxes"].shape[0])
            boxes[i, :k] = d["boxes"][:k].float().cpu()
            scores[i, :k] = d["scores"][:k].float().cpu()
            labels[i, :k] = d["labels"][:k].cpu()
            count[i] = k
        return [
            ("boxes", "FP32", [n, DETECTIONS, 4], boxes.numpy().tobytes()),
            ("scores", "FP32", [n, DETECTIONS], scores.numpy().tobytes()),
            ("labels", "INT64", [n, DETECTIONS], labels.numpy().tobytes()),
            ("count", "INT64", [n], count.numpy().tobytes()),
        ]

    def warm(self, sizes, lanes):
        """Runs one batch of zeros of each size on each lane that has not run
        it yet, the lanes at once (CUDA's lazy initialisation and cuDNN's plan
        choice per shape and thread happen here, not on a served request).
        Called under the worker's load lock."""
        pending = [lane.submit(self._warm_here, sizes, lane) for lane in lanes]
        for f in pending:
            f.result()

    def _warm_here(self, sizes, lane):
        for n in sizes:
            if n not in lane.warmed:
                self._run_here(bytes(n * self.row_bytes), n, lane.stream)
                lane.warmed.add(n)


def build(name, device, image_size, fp16, lane):
    """Builds name on device and runs a batch of 1 on it on lane (a Lane).
    With fp16, a model whose half-precision run fails is rebuilt in fp32 (the
    error is returned as the second value, for the log)."""
    net = Net(name, device, image_size, fp16)
    try:
        net.warm([1], [lane])
        return net, None
    except Exception as e:  # noqa: BLE001 - any failure of fp16 falls back
        if not fp16:
            raise
        net = Net(name, device, image_size, False)
        net.warm([1], [lane])
        return net, e


def check_names(names):
    """Returns the names that are not models of MODELS."""
    return [n for n in names if n not in MODELS]
