#!/usr/bin/python3
"""bench.py measures the worker alone: items/s of Worker.ModelInfer called in
a loop on one thread, with no gRPC and no gateway, so that a change to how the
worker assembles, copies and answers a batch shows apart from the network.

    /usr/bin/python3 workers/torch/bench.py --model mobilenet_v3_small --batch 8 \
        [--image-size 64] [--input fp32|uint8|jpeg] [--seconds 5] [--threads 1] \
        [--worker-dir DIR] [--cprofile FILE]

--worker-dir runs another copy of worker.py and zoo.py (an older commit's, to
compare before and after on the same load; docs/gpu.md). --input jpeg sends
each item as the same encoded JPEG (BYTES), for the models that take images
(preprocess, preprocess+<classifier>), --input uint8 zero pixels (normalize,
normalize+<classifier>). --cprofile writes cProfile's stats
of the timed loop to FILE: the calling thread's by cumulative time, and the
lane thread's (where the batch runs) by own time.

It prints one line: model, batch, input, batches, items/s, ms a batch.
"""

import argparse
import cProfile
import importlib.util
import io
import os
import pstats
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


class Context:
    """The part of grpc.ServicerContext ModelInfer uses: abort raises."""

    def abort(self, code, message):
        raise SystemExit("ModelInfer aborted: %s: %s" % (code, message))


def load_worker(folder):
    spec = importlib.util.spec_from_file_location("piccolo_worker_under_bench", os.path.join(folder, "worker.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def jpeg_row(size):
    """One size×size JPEG of a smooth gradient, the bytes a client sends."""
    import torch
    from torchvision.io import encode_jpeg
    y = torch.linspace(0, 255, size).view(1, size, 1).expand(3, size, size)
    x = torch.linspace(0, 255, size).view(1, 1, size).expand(3, size, size)
    img = ((x + y) / 2).to(torch.uint8).contiguous()
    img[1] = 255 - img[1]
    return bytes(encode_jpeg(img, quality=90).numpy())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mobilenet_v3_small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--input", default="fp32", choices=["fp32", "uint8", "jpeg"])
    ap.add_argument("--jpeg-size", type=int, default=0, help="side of the JPEG sent (default: --image-size)")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--decode-threads", type=int, default=0, help="the worker's --decode-threads (0: its default)")
    ap.add_argument("--worker-dir", default=HERE)
    ap.add_argument("--cprofile", default="")
    args = ap.parse_args()

    w = load_worker(os.path.abspath(args.worker_dir))
    import torch
    torch.set_num_threads(args.threads)
    if args.decode_threads and hasattr(w.zoo, "configure_decode"):
        w.zoo.configure_decode(args.decode_threads)
    worker = w.Worker(torch.device("cpu"), args.image_size, "off", args.batch, w.Metrics(), lambda msg: None)
    worker.load(args.model, args.batch, 1)
    n, s = args.batch, args.image_size
    req = w.pb.ModelInferRequest(model_name=args.model)
    if args.input == "fp32":
        req.inputs.add(name="input", datatype="FP32", shape=[n, 3, s, s])
        req.raw_input_contents.append(bytes(n * 3 * s * s * 4))
    elif args.input == "uint8":
        req.inputs.add(name="pixels", datatype="UINT8", shape=[n, 3, s, s])
        req.raw_input_contents.append(bytes(n * 3 * s * s))
    else:
        row = jpeg_row(args.jpeg_size or s)
        req.inputs.add(name="image", datatype="BYTES", shape=[n])
        req.raw_input_contents.append((struct.pack("<I", len(row)) + row) * n)
    ctx = Context()
    for _ in range(3):  # warm: the first batches pay torch's lazy set-up
        worker.ModelInfer(req, ctx)

    prof = cProfile.Profile() if args.cprofile else None
    lane_prof, lane = None, None
    if prof:  # cProfile sees one thread: one profile for this one, one on the lane's
        lane_prof = cProfile.Profile()
        lane = worker.models[args.model].lanes.get()
        lane.call(lane_prof.enable)
        worker.models[args.model].lanes.put(lane)
    batches, t0 = 0, time.monotonic()
    if prof:
        prof.enable()
    while time.monotonic() - t0 < args.seconds:
        worker.ModelInfer(req, ctx)
        batches += 1
    took = time.monotonic() - t0
    if prof:
        prof.disable()
        lane.call(lane_prof.disable)
        buf = io.StringIO()
        buf.write("=== the gRPC thread (ModelInfer) ===\n")
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(12)
        buf.write("=== the lane's thread (the batch) ===\n")
        pstats.Stats(lane_prof, stream=buf).sort_stats("tottime").print_stats(20)
        with open(args.cprofile, "w") as f:
            f.write(buf.getvalue())
    print("%s b%d %s (%d B a batch): %d batches in %.1fs, %.1f items/s, %.1f ms a batch"
          % (args.model, n, args.input, len(req.raw_input_contents[0]), batches, took, batches * n / took, 1000 * took / batches))


if __name__ == "__main__":
    sys.exit(main())
