#!/usr/bin/env python3
"""Python eager reference for nasnet-large: timm's nasnetalarge on the same GPU, batch and
precision as a gpubench result, timed the way gpubench times (warm-up until steady, then CUDA
events around each step).

Like for like with gpubench nasnet-large:
- timm.create_model("nasnetalarge", pretrained=False, num_classes=1000, drop_rate=0.5): timm's
  default drop_rate is 0, TF's dense_dropout_keep_prob is 0.5; BatchNorm momentum set to
  3e-4 (TF-slim's decay 0.9997; timm's default 0.1 changes no cost), eps 1e-3 as timm builds it;
- synthetic 3x331x331 images uniform in [-1, 1], labels uniform in [0, 1000);
- cross-entropy with label smoothing 0.1 on fp32 logits;
- TF's RMSProp (tf.compat.v1.train.RMSPropOptimizer: decay 0.9, momentum 0.9, epsilon 1.0 inside
  the root, mean square starting at 1), written below with torch._foreach ops since torch has no
  such optimizer (torch.optim.RMSprop puts eps outside the root, starts at 0 and applies lr
  after the momentum); L2 5e-5 on every weight of more than one dimension; global-norm clip 10;
  exponential staircase decay 0.94 every 2 epochs;
- strict fp32 (TF32 off for matmul and cuDNN), or autocast bf16/fp16 around forward and loss;
  cuDNN autotuning on, as gpubench runs.
One numerical difference that costs nothing: timm pads stride-2 average pools explicitly with
zeros and counts them at the edges (its AvgPool2dSame); TF and gpubench average over real pixels.

Usage: nasnet_reference.py --batch N --precision fp32|tf32|amp-bf16|amp-fp16 [--json OUT]
       [--min-steps 10] [--min-seconds 5] [--memory-format contiguous|channels_last]
"""
import argparse
import json
import statistics
import sys

import timm
import torch


class TfRMSProp(torch.optim.Optimizer):
    """tf.compat.v1.train.RMSPropOptimizer (uncentered) with L2 weight decay on the gradient:
    ms = decay ms + (1 - decay) g^2 (ms starts at 1); mom = momentum mom + lr g / sqrt(ms + eps);
    p -= mom."""

    def __init__(self, params, lr=0.01, decay=0.9, momentum=0.9, eps=1.0, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, decay=decay, momentum=momentum, eps=eps,
                                      weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                state = self.state[p]
                if not state:
                    state["ms"] = torch.ones_like(p, memory_format=torch.preserve_format)
                    state["mom"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            grads = [p.grad for p in params]
            ms = [self.state[p]["ms"] for p in params]
            mom = [self.state[p]["mom"] for p in params]
            if group["weight_decay"]:
                grads = torch._foreach_add(grads, params, alpha=group["weight_decay"])
            torch._foreach_mul_(ms, group["decay"])
            torch._foreach_addcmul_(ms, grads, grads, value=1 - group["decay"])
            denom = torch._foreach_add(ms, group["eps"])
            torch._foreach_sqrt_(denom)
            torch._foreach_mul_(mom, group["momentum"])
            torch._foreach_addcdiv_(mom, grads, denom, value=group["lr"])
            torch._foreach_sub_(params, mom)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "amp-bf16", "amp-fp16"])
    p.add_argument("--memory-format", default="contiguous", choices=["contiguous", "channels_last"])
    p.add_argument("--min-steps", type=int, default=10)
    p.add_argument("--min-seconds", type=float, default=5.0)
    p.add_argument("--json")
    a = p.parse_args()

    device = torch.device("cuda")
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    amp = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(a.precision)
    layout = torch.channels_last if a.memory_format == "channels_last" else torch.contiguous_format

    torch.manual_seed(0)
    model = timm.create_model("nasnetalarge", pretrained=False, num_classes=1000, drop_rate=0.5)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = 3e-4
    model = model.to(device, memory_format=layout).train()
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)

    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    opt = TfRMSProp([{"params": decay, "weight_decay": 5e-5},
                     {"params": no_decay, "weight_decay": 0.0}], lr=0.01)
    decay_steps = max(1, int(1281167 / a.batch * 2.0))
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.94 ** (s // decay_steps))
    scaler = torch.amp.GradScaler("cuda", enabled=amp == torch.float16)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)

    g = torch.Generator(device=device).manual_seed(1)
    images = (torch.rand(a.batch, 3, 331, 331, device=device, generator=g) * 2 - 1)
    images = images.contiguous(memory_format=layout)
    labels = torch.randint(0, 1000, (a.batch,), device=device, generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            loss = loss_fn(model(images).float(), labels)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        scaler.step(opt)
        scaler.update()
        schedule.step()

    def timed(n):
        events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        events[0].record()
        for i in range(n):
            step()
            events[i + 1].record()
        events[-1].synchronize()
        return [events[i].elapsed_time(events[i + 1]) for i in range(n)]

    warm = []
    while len(warm) < 3 or not all(abs(t - statistics.median(warm[-3:])) <= 0.05 * statistics.median(warm[-3:]) for t in warm[-3:]):
        warm += timed(1)
        if len(warm) >= 50:
            break
    times = timed(a.min_steps)
    while sum(times) / 1000 < a.min_seconds:
        times += timed(a.min_steps)
    window = sum(times) / 1000
    result = {
        "reference": f"timm {timm.__version__} nasnetalarge",
        "torch": torch.__version__, "device": torch.cuda.get_device_name(), "batch": a.batch,
        "precision": a.precision, "memory_format": a.memory_format,
        "trainable_params": params, "warmup_steps": len(warm),
        "steps": len(times), "step_time_ms_median": statistics.median(times),
        "throughput": a.batch * len(times) / window, "throughput_unit": "images/s",
        "peak_memory_bytes": torch.cuda.max_memory_reserved(),
    }
    print(json.dumps(result, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
