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

A Net is used by the worker's gRPC threads at once: run() may be called from
several threads (one per lane), each with its own lane (a CUDA stream, or none
on the CPU). The module itself is immutable after build().
"""

import threading
import warnings

import torch
import torchvision

# The detector's outputs are padded (or cut) to this many boxes per image:
# COCO's evaluation keeps 100 per image.
DETECTIONS = 100

# name -> (kind, builder, native image size)
MODELS = {
    "resnet50": ("classifier", lambda: torchvision.models.resnet50(weights=None), 224),
    "mobilenet_v3_large": ("classifier", lambda: torchvision.models.mobilenet_v3_large(weights=None), 224),
    "mobilenet_v3_small": ("classifier", lambda: torchvision.models.mobilenet_v3_small(weights=None), 224),
    "ssdlite320_mobilenet_v3_large": (
        "detector",
        lambda: torchvision.models.detection.ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, detections_per_img=DETECTIONS),
        320,
    ),
}

# torch.frombuffer warns that a request's bytes are read-only: the models never
# write to their input, so the warning says nothing.
warnings.filterwarnings("ignore", message="The given buffer is not writable")


class Net:
    """One built model on one device, fp16 or fp32, and its tensor specs."""

    def __init__(self, name, device, image_size, fp16):
        kind, build, native = MODELS[name]
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
        self._lock = threading.Lock()  # serializes warm(); never taken by a request
        self.warmed = set()  # batch sizes run once already

    def run(self, raw, n, lane):
        """Runs one batch of n rows given as raw little-endian FP32 bytes on
        lane (a torch.cuda.Stream, or None on the CPU) and returns the outputs
        as (name, datatype, shape, bytes) tuples, in self.outputs' order."""
        x = torch.frombuffer(raw, dtype=torch.float32).view(n, *self.input_shape)
        with torch.inference_mode():
            if lane is None:
                return self._forward(x, n)
            with torch.cuda.stream(lane):
                x = x.to(self.device, non_blocking=False)
                out = self._forward(x, n)
            lane.synchronize()
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

    def warm(self, sizes, lane):
        """Runs one batch of zeros of each size not run before (CUDA's lazy
        initialisation and kernel selection happen here, not on a served
        request). Called under the worker's load lock."""
        with self._lock:
            for n in sizes:
                if n in self.warmed:
                    continue
                self.run(bytes(n * self.row_bytes), n, lane)
                self.warmed.add(n)


def build(name, device, image_size, fp16):
    """Builds name on device and runs a batch of 1 on it. With fp16, a model
    whose half-precision run fails is rebuilt in fp32 (the error is returned
    as the second value, for the log)."""
    net = Net(name, device, image_size, fp16)
    lane = torch.cuda.Stream(device) if device.type == "cuda" else None
    if not fp16:
        net.warm([1], lane)
        return net, None
    try:
        net.warm([1], lane)
        return net, None
    except Exception as e:  # noqa: BLE001 - any failure of fp16 falls back
        net = Net(name, device, image_size, False)
        net.warm([1], lane)
        return net, e


def check_names(names):
    """Returns the names that are not models of MODELS."""
    return [n for n in names if n not in MODELS]
