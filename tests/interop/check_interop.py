#!/usr/bin/env python3
"""strata's files against the real TensorBoard and safetensors packages.

Usage: check_interop.py tensorboard|safetensors --program strata_interop_files
                        --strata-train strata-train --workdir DIR

Run with the interop tests' virtual environment (tests/interop/interop-venv.sh; CTest does,
through run_interop.sh). Expected values are computed here with NumPy, ml_dtypes and torch
from VALUES (the same list as kInteropValues in interop_files.cc), never read back from
strata. Prints one line per check; exits 1 when any check fails.

tensorboard: TensorBoard's own readers (event_accumulator, and plugin_event_accumulator,
  which is what the TensorBoard server reads through) load strata's scalars, histogram,
  text and image summaries with the right tags, steps, values and plugin names (the images'
  PNGs decoded here); and the summaries of a
  short strata-train run (--model-dir) hold its report's final training loss.
safetensors: the safetensors library loads strata's tensor checkpoint (every dtype, through
  its own parser and the numpy flavour; bfloat16 through ml_dtypes) and a model
  checkpoint; strata loads files written by the library's numpy flavour (float16, float32,
  float64, int32, int64, bool, bfloat16 from ml_dtypes arrays) and, when torch imports,
  its torch flavour (bfloat16 and float16 rounded by torch); strata refuses a dtype it
  does not support with a message naming it.
"""
import argparse
import json
import math
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np

VALUES = [0.0, -0.0, 1.0, -2.5, 1.0 / 3.0, 3.14159265, 65504.0, 1e-3, -1234.5678, 0.1, 7.0, -1e-5]
FAILURES = []


def values_f32(n):
    return np.array([VALUES[i % len(VALUES)] for i in range(n)], dtype=np.float32)


def check(ok, what, detail=None):
    print(f"{'ok' if ok else 'FAIL'}: {what}" + (f" ({detail})" if detail is not None and not ok else ""))
    if not ok:
        FAILURES.append(what)
    return ok


def same_bits(actual, expected):
    """Equal values including the sign of zero (float16/bfloat16 compared as float64)."""
    a, e = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    return a.shape == e.shape and bool(np.array_equal(a, e) and np.array_equal(np.signbit(a), np.signbit(e)))


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kw)


# ---------------------------------------------------------------- tensorboard


def png_pixels(png):
    """(width, height, channels, pixels) of an 8-bit, non-interlaced PNG with filter 0 rows."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    pos, idat, header = 8, b"", None
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        data = png[pos + 8:pos + 8 + length]
        if struct.unpack(">I", png[pos + 8 + length:pos + 12 + length])[0] != zlib.crc32(kind + data):
            return None
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", data)
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    width, height, depth, colour = header[:4]
    channels = {0: 1, 4: 2, 2: 3, 6: 4}[colour]
    raw = zlib.decompress(idat)
    row = width * channels
    pixels = []
    for y in range(height):
        if raw[y * (row + 1)] != 0:
            return None
        pixels += list(raw[y * (row + 1) + 1:(y + 1) * (row + 1)])
    return (width, height, channels, pixels)


def check_tensorboard(a, work):
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.util import tensor_util

    r = run([a.program, "write", work])
    if not check(r.returncode == 0, "strata_interop_files write", r.stderr):
        return
    events = work / "events"
    files = sorted(p.name for p in events.iterdir())
    check(len(files) == 1 and files[0].startswith("events.out.tfevents."), "one events.out.tfevents.* file", files)

    acc = ea.EventAccumulator(str(events), size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    check(sorted(tags["scalars"]) == ["accuracy", "train/loss"], "scalar tags", tags["scalars"])
    check(tags["histograms"] == ["weights"], "histogram tags", tags["histograms"])
    check(sorted(tags["tensors"]) == ["digits", "notes"], "text and image summary tags (string tensors)",
          tags["tensors"])
    for tag, steps, fn in (("train/loss", range(10), lambda s: 1.0 / (s + 1)),
                           ("accuracy", range(0, 20, 5), lambda s: s / 20.0)):
        got = acc.Scalars(tag)
        check([e.step for e in got] == list(steps), f"{tag}: steps", [e.step for e in got])
        # simple_value is a float32: compare with the float32 rounding of the double.
        want = [float(np.float32(fn(s))) for s in steps]
        check([e.value for e in got] == want, f"{tag}: values", ([e.value for e in got], want))
        check(all(e.wall_time > 1.6e9 for e in got), f"{tag}: wall times are Unix seconds")

    hist = acc.Histograms("weights")
    check([h.step for h in hist] == [3], "histogram step", [h.step for h in hist])
    if hist:
        h, v = hist[0].histogram_value, values_f32(12).astype(np.float64)
        check((h.min, h.max, h.num) == (v.min(), v.max(), 12), "histogram min/max/num", (h.min, h.max, h.num))
        check(math.isclose(h.sum, v.sum(), rel_tol=1e-12) and math.isclose(h.sum_squares, (v * v).sum(), rel_tol=1e-12),
              "histogram sum/sum_squares", (h.sum, h.sum_squares))
        # TensorFlow's rule: bucket i counts the values in [limit[i-1], limit[i]).
        limits = list(h.bucket_limit)
        want = [int(np.sum((v >= (limits[i - 1] if i else -np.inf)) & (v < limits[i]))) for i in range(len(limits))]
        check(list(h.bucket) == want and sum(h.bucket) == 12, "histogram buckets hold the values",
              (list(h.bucket), want, limits))
        check(all(x < y for x, y in zip(limits, limits[1:])), "histogram bucket limits increase")

    text = acc.Tensors("notes")
    check([t.step for t in text] == [1], "text step", [t.step for t in text])
    if text:
        arr = tensor_util.make_ndarray(text[0].tensor_proto)
        check(arr.shape == () and arr.item() == b"strata **interop** check", "text value", arr)
    check(acc.SummaryMetadata("notes").plugin_data.plugin_name == "text", "text plugin name")

    images = acc.Tensors("digits")
    check([t.step for t in images] == [2], "image step", [t.step for t in images])
    check(acc.SummaryMetadata("digits").plugin_data.plugin_name == "images", "image plugin name")
    if images:
        blobs = tensor_util.make_ndarray(images[0].tensor_proto)
        check(blobs.shape == (4,) and blobs[0] == b"7" and blobs[1] == b"5", "images: [width, height, 2 PNGs]",
              blobs[:2])
        for i, png in enumerate(blobs[2:]):
            want = [min(255, max(0, math.floor((i * 35 + k) / 80.0 * 255.5))) for k in range(35)]
            got = png_pixels(png)
            check(got == (7, 5, 1, want), f"image {i}: a 7x5 grey PNG of the written pixels", got[:3])

    # The path TensorBoard's server takes: summaries migrated to tensors, by plugin.
    pacc = pea.EventAccumulator(str(events), size_guidance={pea.TENSORS: 0})
    pacc.Reload()
    check(sorted(pacc.PluginTagToContent("scalars")) == ["accuracy", "train/loss"], "scalars plugin tags",
          pacc.PluginTagToContent("scalars"))
    check(list(pacc.PluginTagToContent("histograms")) == ["weights"], "histograms plugin tags")
    check(list(pacc.PluginTagToContent("text")) == ["notes"], "text plugin tags")
    check(list(pacc.PluginTagToContent("images")) == ["digits"], "images plugin tags")
    got = [(t.step, float(tensor_util.make_ndarray(t.tensor_proto))) for t in pacc.Tensors("train/loss")]
    check(got == [(s, float(np.float32(1.0 / (s + 1)))) for s in range(10)], "scalars plugin: train/loss", got)
    hist_tensor = tensor_util.make_ndarray(pacc.Tensors("weights")[0].tensor_proto)
    check(hist_tensor.ndim == 2 and hist_tensor.shape[1] == 3 and hist_tensor[:, 2].sum() == 12,
          "histograms plugin: [k, 3] buckets counting 12 values", hist_tensor.shape)

    # A short strata-train run: the scalars TensorBoard shows end at the report's loss.
    model_dir, report = work / "train", work / "report.json"
    r = run([a.strata_train, "--model", "mlp", "--data", "synthetic", "--strategy", "mirrored", "--replicas", "2",
             "--steps", "20", "--steps-per-loop", "10", "--global-batch", "32", "--eval-steps", "2",
             "--model-dir", model_dir, "--report", report])
    if not check(r.returncode == 0, "strata-train --model-dir run", r.stderr[-2000:]):
        return
    rep = json.loads(report.read_text())
    tacc = ea.EventAccumulator(str(model_dir / "summaries"), size_guidance={ea.SCALARS: 0})
    tacc.Reload()
    loss_tags = [t for t in tacc.Tags()["scalars"] if t.endswith("loss")]
    check(len(loss_tags) == 1, "strata-train summaries: one training loss tag", tacc.Tags()["scalars"])
    if loss_tags:
        got = tacc.Scalars(loss_tags[0])
        check([e.step for e in got] == [10, 20], "strata-train summaries: loss at steps 10 and 20",
              [e.step for e in got])
        check(bool(got) and got[-1].value == float(np.float32(rep["final_train_loss"])),
              "strata-train summaries: last loss is the report's final_train_loss",
              (got[-1].value if got else None, rep["final_train_loss"]))
    eacc = ea.EventAccumulator(str(model_dir / "summaries" / "eval"), size_guidance={ea.SCALARS: 0})
    eacc.Reload()
    eval_loss = [t for t in eacc.Tags()["scalars"] if t.endswith("loss")]
    check(len(eval_loss) == 1 and [e.step for e in eacc.Scalars(eval_loss[0])] == [20]
          and eacc.Scalars(eval_loss[0])[0].value == float(np.float32(rep["eval_loss"])),
          "strata-train eval summaries: eval loss at step 20 is the report's eval_loss", eacc.Tags()["scalars"])


# ---------------------------------------------------------------- safetensors


def expected_strata_tensors():
    """What interop_files.cc's write_tensors saves, computed with NumPy / ml_dtypes."""
    v = values_f32(12)
    return {
        "f32": v.reshape(3, 4),
        "f64": v.astype(np.float64),
        "f16": v.astype(np.float16).reshape(2, 6),
        "bf16": v.astype(ml_dtypes.bfloat16).reshape(4, 3),
        "i32": np.array([0, -1, 2147483647, -2147483648], dtype=np.int32),
        "i64": np.array([[1 << 40, -3], [0, 42]], dtype=np.int64),
        "bool": np.array([True, False, False, True, True]),
        "f32_transposed": v.reshape(3, 4).T.copy(),
        "scalar": np.array(-2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }


SAFETENSORS_NAMES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.float16): "F16",
                     np.dtype(ml_dtypes.bfloat16): "BF16", np.dtype(np.int32): "I32", np.dtype(np.int64): "I64",
                     np.dtype(bool): "BOOL"}


def check_safetensors(a, work):
    import safetensors
    import safetensors.numpy

    r = run([a.program, "write", work])
    if not check(r.returncode == 0, "strata_interop_files write", r.stderr):
        return
    manifest = json.loads((work / "tensors.manifest.json").read_text())
    data = work / manifest["data_file"]
    expected = expected_strata_tensors()

    # The library's own parser: names, dtypes, shapes and raw little-endian bytes.
    flat = dict(safetensors.deserialize(data.read_bytes()))
    check(sorted(flat) == sorted(expected), "deserialize: tensor names", sorted(flat))
    for name, want in expected.items():
        got = flat.get(name)
        if got is None:
            continue
        check(got["dtype"] == SAFETENSORS_NAMES[want.dtype] and list(got["shape"]) == list(want.shape),
              f"deserialize: {name} dtype and shape", (got["dtype"], got["shape"]))
        # x86 is little-endian, as the format is: NumPy's bytes are the file's bytes.
        check(bytes(got["data"]) == want.tobytes(), f"deserialize: {name} bytes", name)

    # The numpy flavour (it has no bfloat16: every other tensor) and the metadata.
    with safetensors.safe_open(str(data), framework="np") as f:
        check(sorted(f.keys()) == sorted(expected), "safe_open(np): keys")
        for name, want in expected.items():
            if name == "bf16":
                continue
            got = f.get_tensor(name)
            check(got.dtype == want.dtype and same_bits(got, want) if got.dtype.kind == "f"
                  else got.dtype == want.dtype and np.array_equal(got, want), f"safe_open(np): {name}", got)
        meta = f.metadata() or {}
    check(isinstance(meta, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()),
          "__metadata__ is a string-to-string map", meta)

    # A model checkpoint (object paths, Adam slots, the iterations counter).
    model = json.loads((work / "model.json").read_text())
    cmanifest = json.loads((work / "model" / "ckpt-3.manifest.json").read_text())
    ckpt = safetensors.numpy.load_file(str(work / "model" / cmanifest["data_file"]))
    for path, var in model.items():
        got = ckpt.get(path)
        check(got is not None and got.dtype == np.float32 and list(got.shape) == var["shape"]
              and np.array_equal(got.astype(np.float64).ravel(), np.array(var["values"])),
              f"model checkpoint: {path}", None if got is None else got.shape)
        for slot in ("m", "v"):
            check(f"{path}/.OPTIMIZER_SLOT/optimizer/{slot}" in ckpt, f"model checkpoint: {path} Adam slot {slot}")
    it = ckpt.get("optimizer/iterations")
    check(it is not None and it.item() == 1, "model checkpoint: optimizer/iterations = 1", it)

    torch = None
    try:
        import torch
    except ImportError:
        print("note: torch does not import here (Debian's python3-torch is not installed): "
              "torch-flavoured checks left out")
    if torch is not None:
        import safetensors.torch
        loaded = safetensors.torch.load_file(str(data))
        want_bf16 = torch.tensor(values_f32(12)).to(torch.bfloat16).reshape(4, 3)
        check(loaded["bf16"].dtype == torch.bfloat16 and torch.equal(loaded["bf16"], want_bf16)
              and torch.equal(torch.signbit(loaded["bf16"]), torch.signbit(want_bf16)),
              "torch flavour: strata's bfloat16 equals torch's rounding", loaded["bf16"])
        want_f16 = torch.tensor(values_f32(12)).to(torch.float16).reshape(2, 6)
        check(loaded["f16"].dtype == torch.float16 and torch.equal(loaded["f16"], want_f16),
              "torch flavour: strata's float16 equals torch's rounding")

    # Files the library writes, read by strata.
    def strata_read(path):
        r = run([a.program, "read", path])
        if not check(r.returncode == 0, f"strata reads {path.name}", r.stderr):
            return None
        return json.loads(r.stdout)

    def compare(contents, arrays, label):
        check(sorted(contents["tensors"]) == sorted(arrays), f"{label}: names", sorted(contents["tensors"]))
        for name, arr in arrays.items():
            got = contents["tensors"].get(name)
            if got is None:
                continue
            dtype = SAFETENSORS_NAMES[arr.dtype]
            check(got["dtype"] == dtype and got["shape"] == list(arr.shape), f"{label}: {name} dtype and shape",
                  (got["dtype"], got["shape"]))
            flat_values = np.array(got["values"], dtype=np.float64).reshape(arr.shape)
            if arr.dtype.kind in "fV" or arr.dtype == ml_dtypes.bfloat16:
                check(same_bits(flat_values, arr.astype(np.float64)), f"{label}: {name} values", got["values"])
            else:
                check(np.array_equal(np.array(got["values"], dtype=np.int64).reshape(arr.shape), arr.astype(np.int64)),
                      f"{label}: {name} values", got["values"])

    v = values_f32(12)
    np_arrays = {
        "f16": v.astype(np.float16).reshape(3, 4),
        "f32": v.reshape(2, 2, 3),
        "f64": v.astype(np.float64) * 1e200,  # beyond float32's range
        "bf16": v.astype(ml_dtypes.bfloat16).reshape(6, 2),
        "i32": np.array([7, -7, 2147483647], dtype=np.int32),
        "i64": np.array([-(1 << 50), 3], dtype=np.int64),
        "bool": np.array([[True, False], [False, True]]),
        "scalar": np.array(0.1, dtype=np.float32),
        "empty": np.zeros((2, 0), dtype=np.float64),
    }
    np_file = work / "from_numpy.safetensors"
    safetensors.numpy.save_file(np_arrays, str(np_file), metadata={"framework": "np", "origin": "check_interop"})
    contents = strata_read(np_file)
    if contents is not None:
        compare(contents, np_arrays, "numpy flavour")
        check(contents["metadata"] == {"framework": "np", "origin": "check_interop"}, "numpy flavour: metadata",
              contents["metadata"])

    # A dtype strata has no counterpart for is refused with its name and the file's.
    u8_file = work / "uint8.safetensors"
    safetensors.numpy.save_file({"bytes": np.arange(4, dtype=np.uint8)}, str(u8_file))
    r = run([a.program, "read", u8_file])
    check(r.returncode == 1 and "U8" in r.stderr and "uint8.safetensors" in r.stderr,
          "strata refuses U8 naming the dtype and the file", r.stderr)

    if torch is not None:
        import safetensors.torch
        t = torch.tensor(values_f32(12))
        torch_tensors = {"bf16": t.to(torch.bfloat16).reshape(3, 4), "f16": t.to(torch.float16).reshape(4, 3),
                         "f32": t.reshape(2, 6), "i64": torch.tensor([5, -6]), "bool": torch.tensor([True, False])}
        pt_file = work / "from_torch.safetensors"
        safetensors.torch.save_file(torch_tensors, str(pt_file), metadata={"format": "pt"})
        contents = strata_read(pt_file)
        if contents is not None:
            # torch's own float conversion of its bfloat16 / float16 values.
            arrays = {k: (x.to(torch.float64).numpy().astype(ml_dtypes.bfloat16) if x.dtype == torch.bfloat16
                          else x.numpy()) for k, x in torch_tensors.items()}
            compare(contents, arrays, "torch flavour")
            check(contents["metadata"] == {"format": "pt"}, "torch flavour: metadata", contents["metadata"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("suite", choices=["tensorboard", "safetensors"])
    p.add_argument("--program", type=Path, required=True)
    p.add_argument("--strata-train", type=Path, required=True)
    p.add_argument("--workdir", type=Path, required=True)
    a = p.parse_args()
    a.workdir.mkdir(parents=True, exist_ok=True)
    (check_tensorboard if a.suite == "tensorboard" else check_safetensors)(a, a.workdir)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed: {FAILURES}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
