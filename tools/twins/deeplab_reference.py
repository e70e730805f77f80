#!/usr/bin/env python3
"""Python eager reference for deeplabv3-resnet101: torchvision's deeplabv3_resnet101 on the
same GPU, batch and precision as a gpubench result, timed the way gpubench times (warm-up until
steady, then CUDA events around each step).

Like for like with gpubench's deeplabv3-resnet101 workload:
- deeplabv3_resnet101(weights=None, weights_backbone=None, num_classes=21, aux_loss=False);
- square crops (513 by default, --size), images normalized with the ImageNet statistics, label
  maps with 1 to 4 objects of classes 1..20 on background 0 and a 5-pixel void (255) band
  around every object boundary, generated once on the GPU;
- references/segmentation/train.py's step: cross_entropy(out, target, ignore_index=255) on the
  logits the model upsamples to the input, torch.optim.SGD(lr 0.01, momentum 0.9,
  weight_decay 1e-4 on every parameter) and PolynomialLR(power 0.9), stepped every iteration;
- strict fp32 (TF32 off in cuBLAS and cuDNN) or autocast bf16/fp16 around forward and loss
  (fp16 with a GradScaler, as train.py --amp); cuDNN autotuning on, as train.py and gpubench.
- --memory-format: contiguous (torchvision as shipped, the default), channels-last, or auto
  (gpubench's rule: channels-last under tf32 and AMP, NCHW in strict fp32), to compare layouts.

Usage: deeplab_reference.py --batch N --precision fp32|amp-bf16 [--json OUT] [--size 513]
       [--memory-format contiguous|channels-last|auto] [--min-steps 10] [--min-seconds 5]
"""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F
import torchvision
from torchvision.models.segmentation import deeplabv3_resnet101

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (the shared timing harness, a sibling module)


def batch(n, size, classes, device, seed=0, max_objects=4, band=5, ignore=255):
    """Images [n, 3, size, size] and labels [n, size, size] as gpubench's SegmentationBatch:
    the same draws in the same order, so the same seed gives the same labels."""
    torch.manual_seed(seed + 1)
    count = torch.randint(1, max_objects + 1, (n, 1))
    cls = torch.randint(1, classes, (n, max_objects))
    cy = torch.rand(n, max_objects) * size
    cx = torch.rand(n, max_objects) * size
    ax = (0.05 + 0.3 * torch.rand(n, max_objects)) * size
    bx = (0.05 + 0.3 * torch.rand(n, max_objects)) * size
    angle = torch.rand(n, max_objects) * math.pi
    present = torch.arange(max_objects).unsqueeze(0) < count
    colours = torch.rand(classes, 3)
    cos, sin = angle.cos(), angle.sin()

    def obj(t, k):
        return t[:, k].to(device).view(n, 1, 1)

    ys = torch.arange(size, device=device, dtype=torch.float32).view(1, size, 1)
    xs = torch.arange(size, device=device, dtype=torch.float32).view(1, 1, size)
    label = torch.zeros(n, size, size, dtype=torch.long, device=device)
    for k in range(max_objects):
        dy, dx = ys - obj(cy, k), xs - obj(cx, k)
        u = (dx * obj(cos, k) + dy * obj(sin, k)) / obj(ax, k)
        v = (dy * obj(cos, k) - dx * obj(sin, k)) / obj(bx, k)
        inside = (u * u + v * v <= 1) & obj(present, k)
        label = torch.where(inside, obj(cls, k), label)
    as_float = label.float().unsqueeze(1)
    high = F.max_pool2d(as_float, band, 1, band // 2)
    low = -F.max_pool2d(-as_float, band, 1, band // 2)
    labels = label.masked_fill((high != low).squeeze(1), ignore)
    base = colours.to(device)[label].permute(0, 3, 1, 2)
    images = 0.6 * base + 0.4 * torch.rand(n, 3, size, size, device=device)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)
    return ((images - mean) / std).contiguous(), labels


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, required=True)
    harness.add_precision_arg(p)
    p.add_argument("--size", type=int, default=513)
    p.add_argument("--memory-format", default="contiguous",
                   choices=["contiguous", "channels-last", "auto"])
    harness.add_window_args(p)
    p.add_argument("--json")
    a = p.parse_args()

    device = torch.device("cuda")
    amp = harness.set_precision(a.precision, cudnn_benchmark=True)
    channels_last = (a.memory_format == "channels-last"
                     or (a.memory_format == "auto" and a.precision != "fp32"))
    layout = torch.channels_last if channels_last else torch.contiguous_format

    torch.manual_seed(0)
    model = deeplabv3_resnet101(weights=None, weights_backbone=None, num_classes=21,
                                aux_loss=False)
    model = model.to(device, memory_format=layout).train()
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    # train.py's parameter groups (backbone, classifier), one rate and decay for both.
    groups = [{"params": [p for p in model.backbone.parameters() if p.requires_grad]},
              {"params": [p for p in model.classifier.parameters() if p.requires_grad]}]
    opt = torch.optim.SGD(groups, lr=0.01, momentum=0.9, weight_decay=1e-4)
    total_iters = 30000
    if hasattr(torch.optim.lr_scheduler, "PolynomialLR"):
        sched = torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=total_iters, power=0.9)
    else:
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda x: (1 - x / total_iters) ** 0.9)
    scaler = harness.grad_scaler(amp)
    images, labels = batch(a.batch, a.size, 21, device)
    images = images.contiguous(memory_format=layout)
    ignore_share = (labels == 255).float().mean().item()
    last = {}

    def step():
        opt.zero_grad(set_to_none=True)
        with harness.autocast(amp):
            out = model(images)["out"]
            loss = F.cross_entropy(out, labels, ignore_index=255)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        last["loss"] = loss.detach()

    timing = harness.time_steps(step, a.min_steps, a.min_seconds, losses=lambda: last)
    result = {
        "reference": f"torchvision {torchvision.__version__} deeplabv3_resnet101(aux_loss=False)",
        **harness.environment(), "batch": a.batch,
        "precision": a.precision, "image_size": a.size,
        "memory_format": "channels-last" if channels_last else "contiguous",
        "trainable_params": params, "ignore_share": ignore_share,
        **harness.summarize(timing, a.batch * len(timing.times_ms), "images/s"),
    }
    return harness.finish(result, a.json)


if __name__ == "__main__":
    sys.exit(main())
