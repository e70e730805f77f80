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
import os
import sys

import timm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (the shared timing harness, a sibling module)


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
    harness.add_precision_arg(p)
    p.add_argument("--memory-format", default="contiguous", choices=["contiguous", "channels_last"])
    harness.add_window_args(p)
    p.add_argument("--json")
    a = p.parse_args()

    device = torch.device("cuda")
    amp = harness.set_precision(a.precision, cudnn_benchmark=True)
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
    scaler = harness.grad_scaler(amp)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)

    g = torch.Generator(device=device).manual_seed(1)
    images = (torch.rand(a.batch, 3, 331, 331, device=device, generator=g) * 2 - 1)
    images = images.contiguous(memory_format=layout)
    labels = torch.randint(0, 1000, (a.batch,), device=device, generator=g)
    last = {}

    def step():
        opt.zero_grad(set_to_none=True)
        with harness.autocast(amp):
            loss = loss_fn(model(images).float(), labels)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        scaler.step(opt)
        scaler.update()
        schedule.step()
        last["loss"] = loss.detach()

    timing = harness.time_steps(step, a.min_steps, a.min_seconds, losses=lambda: last)
    result = {
        "reference": f"timm {timm.__version__} nasnetalarge",
        **harness.environment(), "batch": a.batch,
        "precision": a.precision, "memory_format": a.memory_format,
        "trainable_params": params,
        **harness.summarize(timing, a.batch * len(timing.times_ms), "images/s"),
    }
    return harness.finish(result, a.json)


if __name__ == "__main__":
    sys.exit(main())
