#!/usr/bin/env python3
"""Where a convolution workload's first step at a new batch spends its time (issue 10).

On the H200 (2026-12-01) a search probe of deeplabv3 in amp-bf16 cost 15-17 s at every batch
from 8 to 170, where fp32 cost 2-4 s; its OOM probes cost 5 s. The probes run with cuDNN's
heuristics (no autotuning), so the suspect is building cuDNN execution plans (runtime-compiled
kernels) for every new shape. This script times, in one fresh process per variant, the first and
second training step at batch 2 and the first at batch 3 (a new shape, plans built again) of
torchvision's deeplabv3_resnet101 and timm's nasnetalarge, plus single convolutions of each kind
the workloads use, under:

  bf16-cl     autocast bf16, channels_last, heuristics (what a gpubench bf16 probe does)
  bf16-nchw   autocast bf16, contiguous (NCHW), heuristics
  fp32-nchw   strict fp32 (TF32 off), NCHW, heuristics (gpubench's fp32 probe)
  bf16-cl-B   bf16-cl with TORCH_CUDNN_USE_HEURISTIC_MODE_B=1
  bf16-cl-bm  bf16-cl with cudnn.benchmark (what the timed run's warm-up does)

  python3 docs/results/2026-12-01-h200-allocated-line/conv_plan_cost.py OUT.json [--deadline-s 240]

Writes one JSON document with every variant's timings; prints a table.
"""
import argparse
import json
import os
import subprocess
import sys
import time

VARIANTS = {
    "bf16-cl": dict(dtype="bf16", cl=True, env={}, benchmark=False),
    "bf16-nchw": dict(dtype="bf16", cl=False, env={}, benchmark=False),
    "fp32-nchw": dict(dtype="fp32", cl=False, env={}, benchmark=False),
    "bf16-cl-B": dict(dtype="bf16", cl=True, env={"TORCH_CUDNN_USE_HEURISTIC_MODE_B": "1"},
                      benchmark=False),
    "bf16-cl-bm": dict(dtype="bf16", cl=True, env={}, benchmark=True),
}
PLAN = [("deeplabv3", v) for v in ("bf16-cl", "bf16-nchw", "fp32-nchw", "bf16-cl-B", "bf16-cl-bm")]
PLAN += [("nasnet", v) for v in ("bf16-cl", "bf16-nchw", "fp32-nchw")]

# Single convolutions: (name, in, out, kernel, stride, dilation, groups, spatial)
CONVS = [
    ("3x3", 256, 256, 3, 1, 1, 1, 65),
    ("3x3-dil12", 256, 256, 3, 1, 12, 1, 65),
    ("1x1", 1024, 256, 1, 1, 1, 1, 65),
    ("7x7-s2", 3, 64, 7, 2, 1, 1, 513),
    ("dw5x5", 336, 336, 5, 1, 1, 336, 42),
    ("dw7x7-s2", 168, 168, 7, 2, 1, 168, 83),
]


def child(model_name, variant):
    import torch
    cfg = VARIANTS[variant]
    torch.backends.cudnn.benchmark = cfg["benchmark"]
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    fmt = torch.channels_last if cfg["cl"] else torch.contiguous_format
    bf16 = cfg["dtype"] == "bf16"
    out = {"model": model_name, "variant": variant, "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "convs": {}, "steps": []}

    def sync_time(fn):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - t

    for name, cin, cout, k, s, d, g, hw in CONVS:
        conv = torch.nn.Conv2d(cin, cout, k, s, padding=d * (k // 2), dilation=d, groups=g,
                               bias=False).to(dev, memory_format=fmt)
        times = []
        for b in (2, 2, 3):
            x = torch.randn(b, cin, hw, hw, device=dev).to(memory_format=fmt).requires_grad_()

            def run():
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                    y = conv(x)
                y.float().sum().backward()
            times.append(round(sync_time(run), 4))
        out["convs"][name] = times

    t0 = time.perf_counter()
    if model_name == "deeplabv3":
        import torchvision
        model = torchvision.models.segmentation.deeplabv3_resnet101(
            weights=None, weights_backbone=None, num_classes=21, aux_loss=False)
        size, classes = 513, 21
    else:
        import timm
        model = timm.create_model("nasnetalarge", pretrained=False, num_classes=1001)
        size, classes = 331, 1001
    model = model.to(dev, memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    out["build_s"] = round(time.perf_counter() - t0, 3)
    for b in (2, 2, 3, 3):
        x = torch.randn(b, 3, size, size, device=dev).to(memory_format=fmt)
        if model_name == "deeplabv3":
            y = torch.randint(0, classes, (b, size, size), device=dev)
        else:
            y = torch.randint(0, classes, (b,), device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                o = model(x)
                o = o["out"] if isinstance(o, dict) else o
                loss = torch.nn.functional.cross_entropy(o.float(), y)
            loss.backward()
            opt.step()
        out["steps"].append({"batch": b, "s": round(sync_time(step), 3)})
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--deadline-s", type=float, default=240)
    ap.add_argument("--child", nargs=2)
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return
    start = time.time()
    results = []
    for model, variant in PLAN:
        left = a.deadline_s - (time.time() - start)
        if left < 20:
            results.append({"model": model, "variant": variant, "skipped": "deadline"})
            continue
        env = dict(os.environ, **VARIANTS[variant]["env"])
        t = time.time()
        try:
            p = subprocess.run([sys.executable, __file__, a.out, "--child", model, variant],
                               env=env, capture_output=True, text=True, timeout=min(left, 120))
            line = [l for l in p.stdout.splitlines() if l.startswith("{")]
            r = json.loads(line[-1]) if line else {"model": model, "variant": variant,
                                                    "error": p.stderr[-2000:]}
        except subprocess.TimeoutExpired:
            r = {"model": model, "variant": variant, "error": "timeout"}
        r["process_s"] = round(time.time() - t, 2)
        results.append(r)
        print(json.dumps(r), flush=True)
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)
    print(f"\n{'model':10} {'variant':11} {'proc s':>7} {'build':>6}  steps (batch: s)")
    for r in results:
        steps = " ".join(f"{s['batch']}:{s['s']}" for s in r.get("steps", []))
        print(f"{r['model']:10} {r['variant']:11} {r.get('process_s', 0):7} "
              f"{r.get('build_s', '-'):>6}  {steps} {r.get('error', r.get('skipped', ''))[:200]}")
        for name, t in r.get("convs", {}).items():
            print(f"{'':22} conv {name:10} {t}")


if __name__ == "__main__":
    main()
