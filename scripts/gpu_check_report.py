#!/usr/bin/env python3
"""Assembles $OUT/gpu-check.json from what scripts/gpu-check.sh left in its work folder.

  gpu_check_report.py WORK_DIR OUT_JSON

WORK_DIR holds: stages.tsv (name, status, seconds, rc, note per line), env.json (the
machine, cuDNN and NCCL found), ctest-<label>.xml (CTest's JUnit output), golden-<dev>.txt
(strata-golden's output), train-<dev>.json (strata-train's --report), strata-bench-gpu.json
and torch-gpu.json. Anything missing is left out (its stage says why). The benchmark rows
merge strata-bench's gpu suite with PyTorch's figures of the same workload by name; ratios
> 1 favour strata.
"""
import json
import os
import re
import sys
import xml.etree.ElementTree as ET


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def stages(work):
    rows = []
    try:
        with open(os.path.join(work, "stages.tsv")) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) < 5:
                    continue
                name, status, seconds, rc, note = parts[:5]
                rows.append({"name": name, "status": status, "seconds": float(seconds or 0),
                             "rc": int(rc) if rc.lstrip("-").isdigit() else None, "note": note})
    except OSError:
        pass
    return rows


def ctest(path):
    """Counts and failing test names from CTest's JUnit file."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    cases = root.iter("testcase")
    out = {"passed": 0, "failed": 0, "skipped": 0, "failed_tests": [], "skipped_tests": []}
    for c in cases:
        name = c.get("name")
        if c.find("failure") is not None or c.find("error") is not None or c.get("status") == "fail":
            out["failed"] += 1
            out["failed_tests"].append(name)
        elif c.find("skipped") is not None or c.get("status") in ("notrun", "disabled"):
            out["skipped"] += 1
            out["skipped_tests"].append(name)
        else:
            out["passed"] += 1
    out["total"] = out["passed"] + out["failed"] + out["skipped"]
    return out


def golden(path):
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    m = re.findall(r"^(\d+) passed, (\d+) failed$", text, re.M)
    fails = re.findall(r"^FAIL (\S+)", text, re.M)
    out = {"failed_cases": fails[:200]}
    if m:
        out["passed"], out["failed"] = int(m[-1][0]), int(m[-1][1])
    return out


def benchmarks(strata, torch):
    torch_rows = {r["name"]: r for r in (torch or {}).get("results", [])}
    rows = []
    for r in (strata or {}).get("results", []):
        if r.get("suite") != "gpu":
            continue
        row = {"name": r["name"], "unit": r["unit"], "strata": r["value"], "spread": r.get("spread"),
               "baseline": r.get("baseline"), "baseline_value": r.get("baseline_value"),
               "ratio_vs_baseline": r.get("ratio")}
        for key in ("extra", "note", "error"):
            if key in r:
                row[key] = r[key]
        t = torch_rows.get(r["name"])
        if t:
            row["torch"] = t.get("value")
            if t.get("error"):
                row["torch_error"] = t["error"]
            if r["value"] and t.get("value"):
                row["ratio_vs_torch"] = r["value"] / t["value"]
        # PyTorch's TF32 matmul next to strata's float32 one.
        if r["name"].startswith("matmul f32 "):
            t32 = torch_rows.get(r["name"].replace("matmul f32 ", "matmul tf32 "))
            if t32 and t32.get("value"):
                row["torch_tf32"] = t32["value"]
                if r["value"]:
                    row["ratio_vs_torch_tf32"] = r["value"] / t32["value"]
        rows.append(row)
    # PyTorch rows with no strata row of that name (the TF32 matmuls, the device copy).
    named = {r["name"] for r in rows}
    extra = [t for name, t in torch_rows.items() if name not in named]
    return rows, extra


def main():
    work, out_path = sys.argv[1], sys.argv[2]
    st = stages(work)
    strata = load_json(os.path.join(work, "strata-bench-gpu.json"))
    torch = load_json(os.path.join(work, "torch-gpu.json"))
    rows, torch_only = benchmarks(strata, torch)
    report = {
        "ok": bool(st) and all(s["status"] in ("pass", "not in this mode") for s in st),
        "env": load_json(os.path.join(work, "env.json")),
        "stages": st,
        "ctest": {},
        "golden": {},
        "train": {},
        "benchmarks": rows,
        "torch_only": torch_only,
        "torch": {k: v for k, v in (torch or {}).items() if k != "results"},
    }
    for name in sorted(os.listdir(work)) if os.path.isdir(work) else []:
        path = os.path.join(work, name)
        m = re.match(r"ctest-(.+)\.xml$", name)
        if m:
            report["ctest"][m.group(1)] = ctest(path)
        m = re.match(r"golden-(.+)\.txt$", name)
        if m:
            report["golden"][m.group(1).replace("_", ":")] = golden(path)
        m = re.match(r"train-(.+)\.json$", name)
        if m:
            # cuda_0 -> cuda:0; a precision suffix stays: cuda:0_mixed_float16
            report["train"][re.sub(r"(cpu|cuda)_(\d+)", r"\1:\2", m.group(1))] = load_json(path)
    with open(out_path, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    # A short table for the end of the log and of the device tool's output.
    print("%-52s %10s %10s %8s %10s %8s" % ("benchmark", "strata", "baseline", "ratio", "torch", "ratio"))
    for r in rows:
        if r.get("error"):
            print("%-52s FAILED: %s" % (r["name"], r["error"][:120]))
            continue
        print("%-52s %10.4g %10.4g %7.2fx %10s %8s" % (
            r["name"], r["strata"], r.get("baseline_value") or 0, r.get("ratio_vs_baseline") or 0,
            "%.4g" % r["torch"] if r.get("torch") is not None else "-",
            "%.2fx" % r["ratio_vs_torch"] if r.get("ratio_vs_torch") else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
