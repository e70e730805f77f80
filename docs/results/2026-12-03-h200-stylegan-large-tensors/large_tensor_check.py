#!/usr/bin/env python3
"""Issue 18 on the GPU machine: do the convolution kernels of stylegan's 1024x1024 layers give
the same answer over a whole batch whose tensors pass 2^31 elements as over the same batch in
chunks below it?

stylegan amp-fp16 at batch 132 diverged with D unchanged and its forward over the reals
unchanged, while the R1 penalty (the gradient of D's scores with respect to the reals, in fp32)
grew from 5e-6 to 2e10 in three iterations (docs/results/2026-12-03-h200-stylegan-r1-deeplab-
heuristics). 132 x 16 x 1024 x 1024 = 2.21e9 elements, past 2^31 = 2.147e9 (batch 128 is exactly
2^31); the fp32 suite's batches (92-104) stay below it, and amp-bf16 (212) runs the same layers
in bf16, through other kernels. This checks every convolution kind that the R1 path runs at
those shapes (forward, its adjoint (a transposed convolution: the input gradient), and the weight
gradient, which the double backward runs again as forwards), in each dtype, cuDNN autotuning off
and on, against the same computation in batch chunks of at most CHUNK images.

    python3 docs/results/2026-12-03-h200-stylegan-large-tensors/large_tensor_check.py \
        [BATCH] [CHUNK] [MODES]
        (default 132 33 strict,tf32,fp16,bf16; strict is fp32 with TF32 off, as gpubench's fp32
         and the fp32 islands of its AMP modes run; tf32 is PyTorch's default for convolutions)

Prints one line per case: the largest absolute difference relative to the largest |value|, and
BAD where it is over 1e-2 (fp32) or 5e-2 (fp16/bf16).
"""
import sys
import time

import torch
import torch.nn.functional as F

batch = int(sys.argv[1]) if len(sys.argv) > 1 else 132
chunk = int(sys.argv[2]) if len(sys.argv) > 2 else 33
modes = (sys.argv[3] if len(sys.argv) > 3 else "strict,tf32,fp16,bf16").split(",")
dev = torch.device("cuda:0")
torch.manual_seed(0)


def chunks(n):
    return [(s, min(chunk, n - s)) for s in range(0, n, chunk)]


def rel(a, b):
    scale = b.abs().max().item()
    return (a.float() - b.float()).abs().max().item() / (scale if scale > 0 else 1.0), scale


def wgrad(g, x, w, stride, padding, transposed=False, output_padding=0):
    return torch.ops.aten.convolution_backward(
        g, x, w, None, [stride] * 2, [padding] * 2, [1, 1], transposed,
        [output_padding] * 2, 1, [False, True, False])[1]


def case(name, dtype, full_fn, part_fn, sum_parts=False):
    """full_fn() -> tensor; part_fn(start, length) -> the same on images [start, start+length)."""
    torch.cuda.synchronize()
    t = time.time()
    try:
        full = full_fn()
        parts = [part_fn(s, n) for s, n in chunks(batch)]
        ref = torch.stack([p.float() for p in parts]).sum(0) if sum_parts else torch.cat(parts)
        r, scale = rel(full, ref)
        nonfinite = (~torch.isfinite(full)).sum().item()
        limit = 1e-2 if dtype == torch.float32 else 5e-2
        verdict = "BAD" if (r > limit or nonfinite) else "ok"
        print(f"{verdict:3} {name:52} {str(dtype)[6:]:8} numel {full.numel() if not sum_parts else parts[0].numel():>11} "
              f"| rel diff {r:.3g} (max |ref| {scale:.3g}) nonfinite {nonfinite} "
              f"| {time.time() - t:.1f} s", flush=True)
        del full, parts, ref
    except Exception as e:  # noqa: BLE001 (report and go on)
        print(f"ERR {name:48} {str(dtype)[6:]:8} {type(e).__name__}: {str(e)[:200]}", flush=True)
    torch.cuda.empty_cache()


def run(mode, benchmark):
    dtype = {"strict": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
             "bf16": torch.bfloat16}[mode]
    torch.backends.cudnn.benchmark = benchmark
    torch.backends.cudnn.allow_tf32 = mode != "strict"
    tag = f"{mode} {'autotune' if benchmark else 'heuristics'}"
    x3 = torch.randn(batch, 3, 1024, 1024, device=dev, dtype=dtype)
    x16 = torch.randn(batch, 16, 1024, 1024, device=dev, dtype=dtype)
    g32 = torch.randn(batch, 32, 512, 512, device=dev, dtype=dtype)
    w_rgb = torch.randn(16, 3, 1, 1, device=dev, dtype=dtype) * 0.5
    w3 = torch.randn(16, 16, 3, 3, device=dev, dtype=dtype) * 0.08
    w4 = torch.randn(32, 16, 4, 4, device=dev, dtype=dtype) * 0.06
    blur = torch.tensor([1.0, 2.0, 1.0], device=dev)
    blur = (torch.outer(blur, blur) / 16).to(dtype).view(1, 1, 3, 3)
    planes = x16.view(batch * 16, 1, 1024, 1024)

    def sl(t, s, n):
        return t.narrow(0, s, n)

    def splanes(s, n):
        return planes.narrow(0, s * 16, n * 16)

    # from_rgb: 1x1, 3 -> 16; its input gradient (16 -> 3 transposed) and weight gradient.
    case(f"{tag} from_rgb forward 1x1", dtype, lambda: F.conv2d(x3, w_rgb),
         lambda s, n: F.conv2d(sl(x3, s, n), w_rgb))
    case(f"{tag} from_rgb input grad (transposed 1x1)", dtype,
         lambda: F.conv_transpose2d(x16, w_rgb), lambda s, n: F.conv_transpose2d(sl(x16, s, n), w_rgb))
    case(f"{tag} from_rgb weight grad", dtype, lambda: wgrad(x16, x3, w_rgb, 1, 0),
         lambda s, n: wgrad(sl(x16, s, n), sl(x3, s, n), w_rgb, 1, 0), sum_parts=True)
    # conv0: 3x3 stride 1, 16 -> 16.
    case(f"{tag} conv0 forward 3x3", dtype, lambda: F.conv2d(x16, w3, padding=1),
         lambda s, n: F.conv2d(sl(x16, s, n), w3, padding=1))
    case(f"{tag} conv0 input grad (transposed 3x3)", dtype,
         lambda: F.conv_transpose2d(x16, w3, padding=1),
         lambda s, n: F.conv_transpose2d(sl(x16, s, n), w3, padding=1))
    case(f"{tag} conv0 weight grad", dtype, lambda: wgrad(x16, x16, w3, 1, 1),
         lambda s, n: wgrad(sl(x16, s, n), sl(x16, s, n), w3, 1, 1), sum_parts=True)
    # blur: one-channel 3x3 over [N*16, 1, H, W].
    case(f"{tag} blur forward (N*C planes)", dtype, lambda: F.conv2d(planes, blur, padding=1),
         lambda s, n: F.conv2d(splanes(s, n), blur, padding=1))
    case(f"{tag} blur input grad (transposed)", dtype,
         lambda: F.conv_transpose2d(planes, blur, padding=1),
         lambda s, n: F.conv_transpose2d(splanes(s, n), blur, padding=1))
    # (The blur's weight gradient is never taken: its kernel is a buffer. Over 2.2e9 elements
    # it took 35 s and differed from the chunked sum by 19% in fp32 on 2026-12-03.)
    # conv1_down fused: 4x4 stride 2, 16 -> 32; its adjoint restores 1024 (output_padding 0).
    case(f"{tag} conv1_down forward 4x4/2", dtype, lambda: F.conv2d(x16, w4, stride=2, padding=1),
         lambda s, n: F.conv2d(sl(x16, s, n), w4, stride=2, padding=1))
    case(f"{tag} conv1_down input grad (transposed 4x4/2)", dtype,
         lambda: F.conv_transpose2d(g32, w4, stride=2, padding=1),
         lambda s, n: F.conv_transpose2d(sl(g32, s, n), w4, stride=2, padding=1))
    case(f"{tag} conv1_down weight grad", dtype, lambda: wgrad(g32, x16, w4, 2, 1),
         lambda s, n: wgrad(sl(g32, s, n), sl(x16, s, n), w4, 2, 1), sum_parts=True)
    # Elementwise: LeakyReLU in place, and the square-sum of an input gradient.
    case(f"{tag} leaky_relu_", dtype, lambda: F.leaky_relu(x16.clone(), 0.2, inplace=True),
         lambda s, n: F.leaky_relu(sl(x16, s, n).clone(), 0.2, inplace=True))
    y16 = F.leaky_relu(x16.clone(), 0.2, inplace=True)
    case(f"{tag} leaky_relu_ backward (from its result)", dtype,
         lambda: torch.ops.aten.leaky_relu_backward(x16, y16, 0.2, True),
         lambda s, n: torch.ops.aten.leaky_relu_backward(sl(x16, s, n), sl(y16, s, n), 0.2, True))
    del y16
    case(f"{tag} square-sum per image", dtype, lambda: x3.float().square().sum((1, 2, 3)),
         lambda s, n: sl(x3, s, n).float().square().sum((1, 2, 3)))
    del x3, x16, g32, planes
    torch.cuda.empty_cache()


print(f"torch {torch.__version__} cudnn {torch.backends.cudnn.version()} "
      f"{torch.cuda.get_device_name(0)}; batch {batch} (x16x1024x1024 = {batch * 16 * 2**20} "
      f"elements, 2^31 = {2**31}), chunks of {chunk}", flush=True)
for mode in modes:
    for benchmark in (False, True):
        run(mode, benchmark)
