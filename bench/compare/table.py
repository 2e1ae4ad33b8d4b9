#!/usr/bin/env python3
"""Merges the JSON files bench/compare/run.sh leaves in DIR into one Markdown table.

Usage: table.py DIR    (prints the table and writes it to DIR/table.md)

Reads strata-{1,2}.json (strata-bench train autograd), tf-{1,2}.json (tf_workloads.py),
torch-{1,2}.json (torch_workloads.py), strata-collectives.json, strata-multi-worker.json
(strata-train's report), tf-mwms.json and torch-ddp.json; a missing file leaves its column
empty ("n/a"). Ratios are strata / other for rates and other / strata for times, so
> 1 favours strata. Standard library only (runs with /usr/bin/python3).
"""
import json
import sys
from pathlib import Path


def load(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def fmt(v):
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if v >= 1000 else f"{v:.3g}" if v < 10 else f"{v:.1f}"


def ratio(strata, other, lower_is_better=False):
    if not strata or not other:
        return ""
    return f"{(other / strata if lower_is_better else strata / other):.2f}x"


def main():
    d = Path(sys.argv[1])
    rows = []  # (figure, threads, strata, tf, torch, tf_label, torch_label, lower_is_better)
    versions = {}
    for t in (1, 2):
        s = {r["name"]: r["value"] for r in load(d / f"strata-{t}.json").get("results", [])}
        tf = load(d / f"tf-{t}.json")
        pt = load(d / f"torch-{t}.json")
        versions.setdefault("tf", tf.get("tensorflow"))
        versions.setdefault("keras", tf.get("keras"))
        versions.setdefault("torch", pt.get("torch"))
        for model, label in (("mlp", "MLP 784-512-512-10 b128"), ("cnn", "CNN b64")):
            default, mirrored = s.get(f"{label} default"), s.get(f"{label} mirrored(2)")
            short = "MLP b128" if model == "mlp" else "CNN b64"
            rows += [
                (f"{short} train, default strategy (steps/s)", t, default, tf.get(f"{model}_default_function"),
                 pt.get(f"{model}_steps_per_s"), "custom loop, tf.function", "eager", False),
                (f"{short} train, default strategy (steps/s)", t, default, tf.get(f"{model}_default_eager"),
                 pt.get(f"{model}_compiled_steps_per_s"), "custom loop, eager", "torch.compile", False),
                (f"{short} train, Mirrored(2) (steps/s)", t, mirrored, tf.get(f"{model}_mirrored2_function"),
                 None, "custom loop, tf.function", "", False),
                (f"{short} train, Mirrored(2) (steps/s)", t, mirrored, tf.get(f"{model}_mirrored2_eager"),
                 None, "custom loop, eager", "", False),
                (f"{short} train, Mirrored(2) (steps/s)", t, mirrored, tf.get(f"{model}_fit_mirrored2"),
                 None, "Keras fit", "", False),
            ]
        rows += [
            ("eager add, 1 element, no tape (µs)", t, s.get("eager add, 1 element, no tape"), None,
             pt.get("eager_add_us"), "", "eager", True),
            ("eager add, 1 element, taped (µs)", t, s.get("eager add, 1 element, watching tape"), None,
             pt.get("eager_add_grad_us"), "", "requires_grad", True),
        ]
    mw = load(d / "strata-multi-worker.json")
    mwms, ddp = load(d / "tf-mwms.json"), load(d / "torch-ddp.json")
    rows.append(("MLP 784-256-256-10, 2 worker processes × b64 (samples/s)", 1, mw.get("steady_examples_per_sec", mw.get("examples_per_sec")),
                 mwms.get("mwms_mlp_samples_per_s"), ddp.get("ddp_mlp_samples_per_s"),
                 "MultiWorkerMirrored, tf.function", "DDP (gloo)", False))
    coll = {r["name"]: r["value"] for r in load(d / "strata-collectives.json").get("results", [])}
    # strata-bench names the transport: TCP (what torch.distributed's gloo uses between
    # processes) and shared memory (strata's default for workers on one machine).
    for label, nbytes in (("1 MB", 1 << 20), ("64 MB", 64 << 20)):
        for transport, key in (("TCP", "tcp"), ("shared memory", "shared memory")):
            rows.append((f"all_reduce busbw, 2 processes, {label}, strata over {transport} (GB/s)", 1,
                         coll.get(f"cross-process all_reduce x2 {label} {key} busbw"), None,
                         ddp.get("allreduce_busbw_gbps", {}).get(str(nbytes)), "", "torch.distributed gloo", False))

    tf_name = f"TensorFlow {versions.get('tf') or '2.21'} (Keras {versions.get('keras') or '?'})"
    torch_name = f"PyTorch {versions.get('torch') or '2.x'}"
    lines = [f"| figure | threads | strata | {tf_name} | {torch_name} | strata / TF | strata / PyTorch |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for figure, t, sv, tv, pv, tl, pl, lower in rows:
        tcell = f"{fmt(tv)} ({tl})" if tv is not None else ("n/a" if tl else "—")
        pcell = f"{fmt(pv)} ({pl})" if pv is not None else ("n/a" if pl else "—")
        lines.append(f"| {figure} | {t} | {fmt(sv)} | {tcell} | {pcell} | {ratio(sv, tv, lower)} | "
                     f"{ratio(sv, pv, lower)} |")
    table = "\n".join(lines) + "\n"
    (d / "table.md").write_text(table)
    print(table, end="")


if __name__ == "__main__":
    main()
