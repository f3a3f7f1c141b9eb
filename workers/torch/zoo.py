"""The torchvision models the worker serves, and how one batch runs on them.

preprocess (input "image" BYTES [n]: JPEG or PNG bytes) and normalize (input
"pixels" UINT8 [n, 3, H, W]) answer "input" FP32 [n, 3, H, W], decoded,
resized and ImageNet-normalised; preprocess+<classifier> and
normalize+<classifier> take the same inputs and answer the classifier's
logits, the image staying on the device between the steps (docs/gpu.md,
"Compact inputs"). What follows is about the other models.

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

import os
import queue
import struct
import threading
import warnings
from concurrent.futures import Future, ThreadPoolExecutor

import torch
import torch.nn.functional as F
import torchvision
from torchvision.io import ImageReadMode, decode_image, decode_jpeg, encode_jpeg

# PREPROCESS is the model that decodes and normalises encoded images.
PREPROCESS = "preprocess"
# NORMALIZE is the model that normalises UINT8 pixels (4 times fewer bytes
# than FP32 on the wire, and nothing to decode).
NORMALIZE = "normalize"

# What an encoded image may be (docs/gpu.md, "Hostile images"): the bytes of
# one, and the pixels its header declares, checked before anything is decoded,
# so that a small file declaring a huge image (a decompression bomb) costs a
# header read. 16.8 megapixels (4096 x 4096) is a 12-megapixel photograph with
# room to spare; a decode thread then holds at most 50 MB of pixels and 200 MB
# of them in float while it resizes.
MAX_IMAGE_BYTES = 16 << 20
MAX_IMAGE_PIXELS = 4096 * 4096
MAX_JPEG_SEGMENTS = 512  # markers before the frame header; a real file has under 20

# ImageNet's mean and standard deviation per channel, on 0..1 values: what
# torchvision's classifiers are trained on (their weights' transforms).
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

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
    # Encoded images (JPEG or PNG bytes) to the classifiers' FP32 input: a
    # module of a session like any other (docs/gpu.md, "Compact inputs").
    PREPROCESS: ("preprocess", None, 224, False),
    # UINT8 RGB pixels, already the model's size, to the same FP32 input.
    NORMALIZE: ("preprocess", None, 224, False),
}
# preprocess+<classifier>: the chain preprocess -> classifier as one model
# (docs/fusion.md's naming rule), so that the decoded images go from the
# decoder to the model on the device and never back over gRPC as FP32.
for _name, (_kind, _build, _size, _half) in list(MODELS.items()):
    if _kind == "classifier":
        MODELS[PREPROCESS + "+" + _name] = ("classifier", _build, _size, _half)
        MODELS[NORMALIZE + "+" + _name] = ("classifier", _build, _size, _half)
del _name, _kind, _build, _size, _half


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


class BadImage(ValueError):
    """An item's encoded image that is not a JPEG or PNG, is over the limits,
    or does not decode: the worker answers INVALID_ARGUMENT with its message."""


def split_images(raw, n):
    """Splits the data of a BYTES tensor of n elements (each a 4-byte
    little-endian length and its bytes, KServe's raw layout) into n
    memoryviews over raw (no copy), and checks each one's header
    (image_header) before anything is decoded. Raises BadImage naming the item."""
    mv = memoryview(raw)
    rows, off, end = [], 0, len(mv)
    for i in range(n):
        if off + 4 > end:
            raise BadImage("item %d: BYTES data truncated: %d bytes left where a 4-byte length belongs" % (i, end - off))
        (size,) = struct.unpack_from("<I", mv, off)
        off += 4
        if size > end - off:
            raise BadImage("item %d: BYTES element of %d bytes runs past the data (%d left)" % (i, size, end - off))
        row = mv[off:off + size]
        off += size
        try:
            image_header(row)
        except BadImage as e:
            raise BadImage("item %d: %s" % (i, e)) from None
        rows.append(row)
    if off != end:
        raise BadImage("%d bytes after the %d images of the batch; the data must hold exactly shape[0] elements" % (end - off, n))
    return rows


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def image_header(b):
    """Returns (format, width, height) of an encoded image from its header
    alone (JPEG's frame header, PNG's IHDR) and checks them against
    MAX_IMAGE_BYTES and MAX_IMAGE_PIXELS. Raises BadImage saying what is wrong
    and what is allowed."""
    if len(b) == 0:
        raise BadImage("empty image; want the bytes of a JPEG or PNG")
    if len(b) > MAX_IMAGE_BYTES:
        raise BadImage("image of %d bytes is over the limit of %d" % (len(b), MAX_IMAGE_BYTES))
    if bytes(b[:8]) == PNG_SIGNATURE:
        if len(b) < 24 or bytes(b[12:16]) != b"IHDR":
            raise BadImage("PNG without its IHDR header")
        fmt, (w, h) = "PNG", struct.unpack_from(">II", b, 16)
    elif bytes(b[:2]) == b"\xff\xd8":
        fmt, (w, h) = "JPEG", jpeg_size(b)
    else:
        raise BadImage("not a JPEG or PNG (it starts %s); allowed: JPEG, PNG" % bytes(b[:8]).hex())
    if w < 1 or h < 1:
        raise BadImage("%s header declares %dx%d pixels; want at least 1x1" % (fmt, w, h))
    if w * h > MAX_IMAGE_PIXELS:
        raise BadImage("%s header declares %dx%d = %d pixels, over the limit of %d" % (fmt, w, h, w * h, MAX_IMAGE_PIXELS))
    return fmt, w, h


def jpeg_size(b):
    """(width, height) from a JPEG's frame header (SOFn), walking the segments
    before it; at most MAX_JPEG_SEGMENTS of them. Raises BadImage."""
    off, end = 2, len(b)
    for _ in range(MAX_JPEG_SEGMENTS):
        if off + 4 > end:
            raise BadImage("JPEG without a frame header (SOF) in its %d bytes" % end)
        if b[off] != 0xFF:
            raise BadImage("corrupt JPEG: byte %d is 0x%02x where a marker belongs" % (off, b[off]))
        m = b[off + 1]
        if m == 0xFF:  # fill byte
            off += 1
            continue
        if m == 0x01 or 0xD0 <= m <= 0xD7:  # markers without a length
            off += 2
            continue
        if m in (0xD9, 0xDA):
            raise BadImage("corrupt JPEG: %s before a frame header" % ("end of image" if m == 0xD9 else "scan data"))
        seg = (b[off + 2] << 8) | b[off + 3]
        if seg < 2:
            raise BadImage("corrupt JPEG: segment length %d at byte %d" % (seg, off))
        if 0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC):  # SOF0..SOF15 less DHT, JPG, DAC
            if off + 9 > end:
                raise BadImage("JPEG frame header cut short")
            h, w = struct.unpack_from(">HH", b, off + 5)
            return w, h
        off += 2 + seg
    raise BadImage("JPEG with more than %d segments before its frame header" % MAX_JPEG_SEGMENTS)


# CPU decoding runs on this pool (torchvision's decoders release the GIL):
# images of a batch decode and resize at once, each on its own thread.
# configure_decode sets its size before the first batch.
DECODE_THREADS = min(4, os.cpu_count() or 1)
_decode_pool = None
_decode_pool_lock = threading.Lock()


def configure_decode(threads):
    """Sets the size of the CPU decode pool (--decode-threads); 0: min(4, CPUs)."""
    global DECODE_THREADS
    if threads > 0:
        DECODE_THREADS = threads


def decode_pool():
    global _decode_pool
    with _decode_pool_lock:
        if _decode_pool is None:
            _decode_pool = ThreadPoolExecutor(max_workers=DECODE_THREADS, thread_name_prefix="decode")
        return _decode_pool


def _fit(img, size):
    """img (uint8 [3, h, w]) as float [3, size, size] on 0..255: bilinear with
    antialiasing when the size differs (the aspect ratio is not kept)."""
    x = img.float()
    if img.shape[1] != size or img.shape[2] != size:
        x = F.interpolate(x.unsqueeze(0), size=(size, size), mode="bilinear", align_corners=False, antialias=True)[0]
    return x


def _decode_cpu(i, row, size, out):
    """Decodes row into out[i] on a pool thread (inference mode is per thread,
    and out was made under it)."""
    with torch.inference_mode():
        try:
            img = decode_image(torch.frombuffer(row, dtype=torch.uint8), ImageReadMode.RGB)
        except RuntimeError as e:
            why = str(e).strip().splitlines()
            raise BadImage("item %d: the image does not decode: %s" % (i, why[0] if why else type(e).__name__)) from None
        out[i].copy_(_fit(img, size))


def images_to_input(rows, size, device, dtype):
    """Decodes rows (encoded images, their headers checked by split_images),
    resizes each to size x size and normalises with MEAN and STD: a tensor
    [n, 3, size, size] of dtype on device. On a GPU the JPEGs decode there
    (nvJPEG, torchvision.io.decode_jpeg on the device; a batch it refuses is
    decoded on the CPU instead, which names the bad item); otherwise on the
    CPU decode pool, one image a thread. Runs on the lane's thread (and, on a
    GPU, its stream). Raises BadImage."""
    n = len(rows)
    x = None
    if device.type == "cuda" and all(bytes(r[:2]) == b"\xff\xd8" for r in rows):
        try:
            datas = [torch.frombuffer(r, dtype=torch.uint8) for r in rows]
            try:
                imgs = decode_jpeg(datas, mode=ImageReadMode.RGB, device=device)  # torchvision >= 0.19: one call a batch
            except TypeError:
                imgs = [decode_jpeg(d, mode=ImageReadMode.RGB, device=device) for d in datas]
            x = torch.stack([_fit(img, size) for img in imgs])
        except RuntimeError:
            x = None  # a corrupt image, or nvJPEG without this format: the CPU path below names it
    if x is None:
        x = torch.empty(n, 3, size, size)
        pool = decode_pool()
        for f in [pool.submit(_decode_cpu, i, r, size, x) for i, r in enumerate(rows)]:
            f.result()
        if device.type == "cuda":
            x = x.pin_memory().to(device, non_blocking=True)
    return normalize(x, dtype)


def normalize(x, dtype):
    """x (float or uint8 [n, 3, h, w] on 0..255) as (x/255 - MEAN) / STD in dtype."""
    mean = torch.tensor(MEAN, device=x.device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=x.device).view(1, 3, 1, 1) * 255
    return ((x.float() - mean) / std).to(dtype)


class Net:
    """One built model on one device, fp16 or fp32, and its tensor specs.
    preprocess and the preprocess+<classifier> chains take encoded images
    (input "image" BYTES [n]), normalize and normalize+<classifier> UINT8
    pixels (input "pixels" UINT8 [n, 3, H, W]); the others FP32 images."""

    def __init__(self, name, device, image_size, fp16):
        kind, build, native, _ = MODELS[name]
        self.name, self.kind, self.device = name, kind, device
        self.size = image_size or native
        self.fp16 = fp16
        self.prep = name == PREPROCESS or name.startswith(PREPROCESS + "+")
        self.pixels = name == NORMALIZE or name.startswith(NORMALIZE + "+")
        m = None
        if build is not None:
            # Random weights, but the same for every build of an architecture:
            # a chain preprocess+<model> answers as preprocess then <model> do.
            # Builds run under the worker's load lock, so the global seed is ours.
            torch.manual_seed(0)
            with torch.inference_mode():
                m = build().eval().to(device)
                if fp16 and kind == "classifier":
                    m = m.half()
        self.module = m
        self.input_shape = (3, self.size, self.size)
        self.row_bytes = (1 if self.pixels else 4) * 3 * self.size * self.size
        self._pinned = {}  # lane -> pinned host buffer (CUDA only), grown to the largest batch
        if kind == "classifier":
            self.outputs = [("logits", "FP32", [-1, 1000])]
        elif kind == "preprocess":
            self.outputs = [("input", "FP32", [-1, 3, self.size, self.size])]
        else:
            self.outputs = [
                ("boxes", "FP32", [-1, DETECTIONS, 4]),
                ("scores", "FP32", [-1, DETECTIONS]),
                ("labels", "INT64", [-1, DETECTIONS]),
                ("count", "INT64", [-1]),
            ]
        if self.prep:
            self.inputs = [("image", "BYTES", [-1])]
            self.warm_row = bytes(encode_jpeg(torch.full((3, self.size, self.size), 128, dtype=torch.uint8)).numpy())
        elif self.pixels:
            self.inputs = [("pixels", "UINT8", [-1, 3, self.size, self.size])]
        else:
            self.inputs = [("input", "FP32", [-1, 3, self.size, self.size])]

    def run(self, data, n, lane):
        """Runs one batch of n rows on lane (a Lane: its thread, on its stream)
        and returns the outputs as (name, datatype, shape, bytes) tuples, in
        self.outputs' order. data: raw little-endian FP32 bytes, or for the
        models that take images the list of n encoded images split_images
        returned."""
        return lane.call(self._run_here, data, n, lane)

    def _run_here(self, data, n, lane):
        stream = lane.stream if lane is not None else None
        with torch.inference_mode():
            if stream is None:
                return self._forward(self._input(data, n, None), n)
            with torch.cuda.stream(stream):
                out = self._forward(self._input(data, n, lane), n)
            stream.synchronize()
            return out

    def _input(self, data, n, lane):
        """The batch on the device, in the model's dtype: one frombuffer over
        the request's bytes (no copy) on the CPU; on a GPU one copy into the
        lane's pinned buffer and an asynchronous copy from it on the lane's
        stream (the buffer is reused once the stream has synchronised)."""
        dtype = torch.float16 if (self.fp16 and self.kind == "classifier") else torch.float32
        if self.prep:
            return images_to_input(data, self.size, self.device, dtype)
        x = torch.frombuffer(data, dtype=torch.uint8 if self.pixels else torch.float32)
        if lane is not None:
            buf = self._pinned.get(lane)
            if buf is None or buf.numel() < len(data):
                buf = torch.empty(len(data), dtype=torch.uint8).pin_memory()
                self._pinned[lane] = buf
            host = buf[:len(data)]
            host.copy_(torch.frombuffer(data, dtype=torch.uint8))
            x = host.to(self.device, non_blocking=True).view(x.dtype)
        x = x.view(n, *self.input_shape)
        if self.pixels:
            return normalize(x, dtype)
        return x.to(dtype)

    def _forward(self, x, n):
        if self.kind == "preprocess":
            return [("input", "FP32", [n, 3, self.size, self.size], x.float().cpu().numpy().tobytes())]
        if self.kind == "classifier":
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
        """Runs one batch of zeros (or of one grey JPEG, for the models that
        take images) of each size on each lane that has not run it yet, the
        lanes at once (CUDA's lazy initialisation and cuDNN's plan choice per
        shape and thread happen here, not on a served request). Called under
        the worker's load lock."""
        pending = [lane.submit(self._warm_here, sizes, lane) for lane in lanes]
        for f in pending:
            f.result()

    def _warm_here(self, sizes, lane):
        for n in sizes:
            if n not in lane.warmed:
                data = [memoryview(self.warm_row)] * n if self.prep else bytes(n * self.row_bytes)
                self._run_here(data, n, lane)
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
