#!/usr/bin/env python3
"""Python eager reference for mask-rcnn: torchvision's Mask R-CNN R-50-FPN on the same GPU,
batch and precision as a gpubench result, timed the way gpubench times (warm-up until steady,
then CUDA events around each step).

The model is maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=81,
trainable_backbone_layers=3) as it is built when a backbone is pretrained: FrozenBatchNorm2d
everywhere and conv1 + layer1 frozen. (With weights_backbone=None torchvision itself switches
to trainable BatchNorm2d and all five layers trainable, so this script builds the same graph
through resnet_fpn_backbone(weights=None, norm_layer=FrozenBatchNorm2d, trainable_layers=3) +
MaskRCNN(num_classes=81).) Trainable parameters: 44,125,173, as gpubench's mask-rcnn.

Like for like: 800x1333 images (torchvision's transform resizes them by 1.0 and pads to
800x1344), a fixed number of ground-truth boxes per image with log-uniform sqrt(area) in
[16, 512] and aspect ratio in [1/2, 2], classes in [1, 81), masks = the ellipse inscribed in
each box; SGD momentum 0.9, lr 0.02 x min(batch, 16) / 16 (biases 2x, no decay), weight decay 1e-4,
maskrcnn-benchmark's linear warm-up (1/3 over 500 iterations); strict fp32 (TF32 off in cuBLAS
and cuDNN) or autocast bf16/fp16 around forward and loss.

FrozenBatchNorm statistics: there are no ImageNet weights, so (as gpubench does) every
FrozenBatchNorm2d of the backbone gets the statistics of its input on the first two images
(one pass through the body, without gradient, in the model's own order): mean 0 and standard
deviation 1, except each residual branch's last (bn3), which gets 1 / sqrt(16) for R-50's 16
blocks (--bn-stats calibrated, the default). With the identity statistics (--bn-stats
identity) the randomly initialized backbone without normalization hands the heads features far
larger than a pretrained one's, and at the reference's rate training diverges within a few
iterations (every loss NaN at batch 16 in amp-bf16, measured on an H200 on 2026-12-01).

Losses: the harness reads them after the warm-up and after the timed window; when one is NaN
or infinite the result says "status": "diverged", reports no throughput, and the script exits
with 1.

Known differences from maskrcnn-benchmark (and gpubench) that torchvision brings: ResNet stride
in the 3x3 conv; anchors without the legacy +1; no straddling-anchor filter; the 2000
post-NMS proposals are kept per image, not per batch; box-head smooth L1 with beta 1/9;
mask targets are RoIAlign crops of full-size masks; NMS and the proposal/sampling code read
values on the host (torchvision.ops.nms and nonzero), which synchronizes each step.
The mask head runs on the sampled positives only, whose number depends on how well the RPN
proposes the boxes (few at initialization); --count-positives reports it, since gpubench always
runs the mask head on 128 slots per image (the reference's maximum).

Usage: maskrcnn_reference.py --batch N --precision fp32|tf32|amp-bf16|amp-fp16 [--json OUT]
       [--min-steps 10] [--min-seconds 5] [--boxes 7] [--count-positives]
       [--bn-stats calibrated|identity]
"""
import argparse
import math
import os
import sys

import torch
import torchvision
from torchvision.models.detection import MaskRCNN
from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
from torchvision.ops.misc import FrozenBatchNorm2d

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (the shared timing harness, a sibling module)

HEIGHT, WIDTH, CLASSES = 800, 1333, 81
TARGET_PARAMS = 44125173


def build(device):
    try:
        backbone = resnet_fpn_backbone(backbone_name="resnet50", weights=None,
                                       norm_layer=FrozenBatchNorm2d, trainable_layers=3)
    except TypeError:  # torchvision < 0.13: positional (name, pretrained)
        backbone = resnet_fpn_backbone("resnet50", False, norm_layer=FrozenBatchNorm2d,
                                       trainable_layers=3)
    return MaskRCNN(backbone, num_classes=CLASSES).to(device).train()


def calibrate_frozen_bn(model, images, count=2):
    """Give every FrozenBatchNorm2d of the backbone body the statistics of its input on the
    first `count` images, as a BatchNorm that has seen them: bias 0, running_mean and
    running_var the per-channel mean and (biased) variance, weight 1, except the last of each
    residual branch (bn3), whose weight is 1 / sqrt(residual blocks), so the branches'
    variances sum to 1 whatever the depth. One forward pass of the body without gradient; each
    layer is measured on its input with every earlier layer already calibrated (the hook runs
    just before the layer does)."""
    body = model.backbone.body
    blocks = sum(1 for m in body.modules() if isinstance(m, torchvision.models.resnet.Bottleneck))
    branch_gain = 1.0 / math.sqrt(blocks)

    def measure(module, inputs):
        x = inputs[0].float()
        module.weight.fill_(branch_gain if module.branch_end else 1.0)
        module.bias.zero_()
        module.running_mean.copy_(x.mean(dim=(0, 2, 3)))
        module.running_var.copy_(x.var(dim=(0, 2, 3), unbiased=False).clamp_min(1e-5))

    hooks = []
    for name, m in body.named_modules():
        if isinstance(m, FrozenBatchNorm2d):
            m.branch_end = name.endswith(".bn3")
            hooks.append(m.register_forward_pre_hook(measure))
    try:
        with torch.no_grad():
            batch = model.transform(images[:count])[0].tensors  # normalized and padded
            body(batch)
    finally:
        for h in hooks:
            h.remove()
    return len(hooks)


def synthetic(n, boxes_per_image, device, seed=0):
    """Images in [0, 1] (torchvision normalizes them) and COCO-like targets, as gpubench's."""
    g = torch.Generator().manual_seed(seed)
    images = [torch.rand(3, HEIGHT, WIDTH, generator=g).to(device) for _ in range(n)]
    ys = torch.arange(HEIGHT, dtype=torch.float32).view(HEIGHT, 1) + 0.5
    xs = torch.arange(WIDTH, dtype=torch.float32).view(1, WIDTH) + 0.5
    targets = []
    for _ in range(n):
        shape = (boxes_per_image,)
        side = torch.exp(torch.empty(shape).uniform_(math.log(16), math.log(512), generator=g))
        root_aspect = torch.exp(0.5 * torch.empty(shape).uniform_(math.log(0.5), math.log(2.0),
                                                                  generator=g))
        w = (side / root_aspect).clamp(1, WIDTH)
        h = (side * root_aspect).clamp(1, HEIGHT)
        x0 = torch.rand(shape, generator=g) * (WIDTH - w)
        y0 = torch.rand(shape, generator=g) * (HEIGHT - h)
        boxes = torch.stack([x0, y0, x0 + w, y0 + h], 1)  # pixel extents, torchvision's boxes
        labels = torch.randint(1, CLASSES, shape, generator=g)
        cx, cy, rx, ry = x0 + w / 2, y0 + h / 2, w / 2, h / 2
        masks = torch.stack([(((xs - cx[i]) / rx[i]) ** 2 + ((ys - cy[i]) / ry[i]) ** 2 <= 1)
                             for i in range(boxes_per_image)]).to(torch.uint8)
        targets.append({"boxes": boxes.to(device), "labels": labels.to(device),
                        "masks": masks.to(device)})
    return images, targets


def make_optimizer(model, batch):
    """maskrcnn-benchmark's make_optimizer (biases at 2x lr, no decay) and WarmupMultiStepLR;
    the rate scaled linearly down to smaller batches, never up (as gpubench's mask-rcnn)."""
    lr = 0.02 * min(batch, 16) / 16
    weights = [p for n, p in model.named_parameters() if p.requires_grad and "bias" not in n]
    biases = [p for n, p in model.named_parameters() if p.requires_grad and "bias" in n]
    opt = torch.optim.SGD([{"params": weights, "lr": lr, "weight_decay": 1e-4},
                           {"params": biases, "lr": 2 * lr, "weight_decay": 0.0}],
                          lr=lr, momentum=0.9)

    def factor(it):  # LambdaLR's epoch counter starts at 0; maskrcnn-benchmark's first is 1
        it = it + 1
        warm = 1.0 / 3 * (1 - it / 500) + it / 500 if it < 500 else 1.0
        return warm * 0.1 ** sum(it >= m for m in (60000, 80000))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, required=True)
    harness.add_precision_arg(p)
    p.add_argument("--boxes", type=int, default=7, help="ground-truth boxes per image")
    harness.add_window_args(p)
    p.add_argument("--count-positives", action="store_true",
                   help="after timing, count the box head's sampled positives per image")
    p.add_argument("--bn-stats", choices=["calibrated", "identity"], default="calibrated",
                   help="FrozenBatchNorm statistics: measured on two images (default) or the "
                        "identity, which diverges")
    p.add_argument("--json")
    a = p.parse_args()

    device = torch.device("cuda")
    amp = harness.set_precision(a.precision, cudnn_benchmark=True)
    torch.manual_seed(0)
    model = build(device)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if params != TARGET_PARAMS:
        print(f"warning: {params} trainable parameters, expected {TARGET_PARAMS}", file=sys.stderr)
    opt, sched = make_optimizer(model, a.batch)
    scaler = harness.grad_scaler(amp)
    images, targets = synthetic(a.batch, a.boxes, device)
    calibrated = calibrate_frozen_bn(model, images) if a.bn_stats == "calibrated" else 0
    last = {}

    def step():
        opt.zero_grad(set_to_none=True)
        with harness.autocast(amp):
            losses = model(images, targets)
            loss = sum(losses.values())
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        last.update({k: v.detach() for k, v in losses.items()}, loss=loss.detach())

    timing = harness.time_steps(step, a.min_steps, a.min_seconds, losses=lambda: last)
    result = {
        "reference": f"torchvision {torchvision.__version__} MaskRCNN R-50-FPN (FrozenBN, "
                     "trainable_layers=3, 81 classes)",
        **harness.environment(), "batch": a.batch,
        "precision": a.precision, "trainable_params": params, "gt_boxes_per_image": a.boxes,
        "bn_stats": a.bn_stats, "calibrated_frozen_bn": calibrated,
        **harness.summarize(timing, a.batch * len(timing.times_ms), "images/s"),
    }
    if a.count_positives:
        # The box head's sampled foreground, which is also the mask head's batch.
        counts = []
        select = model.roi_heads.select_training_samples

        def counting(proposals, targets_):
            out = select(proposals, targets_)
            counts.extend(int((labels > 0).sum()) for labels in out[2])
            return out

        model.roi_heads.select_training_samples = counting
        for _ in range(3):
            step()
        model.roi_heads.select_training_samples = select
        result["positive_rois_per_image"] = sum(counts) / len(counts)
    return harness.finish(result, a.json)


if __name__ == "__main__":
    sys.exit(main())
