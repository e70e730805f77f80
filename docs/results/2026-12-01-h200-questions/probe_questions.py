#!/usr/bin/env python3
"""Quick questions answered with the GPU machine's PyTorch (same ATen/cuDNN as its libtorch),
before gpubench is built there. Each prints one line; seconds each.

1. Double backward of a convolution (StyleGAN's R1 penalty): PyTorch's own derivative against a
   backward written as plain convolutions (the gradfix formulation), at StyleGAN D's 1024x1024
   first layers, fp32 strict and bf16.
2. cuDNN workspaces: peak memory of a strict-fp32 convolution step with cudnn.benchmark on,
   with and without CUDNN_CONV_WSCAP_DBG (a cap, MiB), and with benchmark off.
"""
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def sync_time(fn, reps=3):
    fn()
    torch.cuda.synchronize()
    best = 1e9
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


class GradfixConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, stride, padding):
        ctx.save_for_backward(x, w)
        ctx.stride, ctx.padding = stride, padding
        return F.conv2d(x, w, None, stride, padding)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        s, p = ctx.stride, ctx.padding
        op = x.shape[2] - ((g.shape[2] - 1) * s - 2 * p + w.shape[2])
        gx = GradfixConvT.apply(g, w, s, p, op)
        gw = GradfixW.apply(g, x, w, s, p)
        return gx, gw, None, None


class GradfixConvT(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, stride, padding, op):
        ctx.save_for_backward(x, w)
        ctx.stride, ctx.padding, ctx.op = stride, padding, op
        return F.conv_transpose2d(x, w, None, stride, padding, op)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gx = GradfixConv.apply(g, w, ctx.stride, ctx.padding)
        gw = torch.ops.aten.convolution_backward(g, x, w, None, [ctx.stride] * 2, [ctx.padding] * 2,
                                                 [1, 1], True, [ctx.op] * 2, 1,
                                                 [False, True, False])[1]
        return gx, gw, None, None, None


class GradfixW(torch.autograd.Function):
    @staticmethod
    def forward(ctx, g, x, w, stride, padding):
        ctx.save_for_backward(g, x)
        ctx.stride, ctx.padding, ctx.wshape = stride, padding, w.shape
        return torch.ops.aten.convolution_backward(g, x, w, None, [stride] * 2, [padding] * 2,
                                                   [1, 1], False, [0, 0], 1,
                                                   [False, True, False])[1]

    @staticmethod
    def backward(ctx, gg):
        g, x = ctx.saved_tensors
        s, p = ctx.stride, ctx.padding
        ggo = GradfixConv.apply(x, gg, s, p)
        op = x.shape[2] - ((g.shape[2] - 1) * s - 2 * p + gg.shape[2])
        gx = GradfixConvT.apply(g, gg, s, p, op)
        return ggo, gx, None, None, None


def r1(conv, x0, ws):
    x = x0.detach().requires_grad_(True)
    h = F.leaky_relu(conv(x, ws[0], 1, 0), 0.2)       # from_rgb 1x1 at 1024
    h = F.leaky_relu(conv(h, ws[1], 1, 1), 0.2)       # conv0 3x3 at 1024
    h = F.leaky_relu(conv(h, ws[2], 2, 1), 0.2)       # fused 4x4 down to 512
    s = h.sum()
    g, = torch.autograd.grad(s, x, create_graph=True)
    (g.float().square().sum() + s).backward()


def question_double_backward():
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    for dtype in (torch.float32, torch.bfloat16):
        x0 = torch.randn(16, 3, 1024, 1024, device="cuda", dtype=dtype)
        ws = [torch.randn(16, 3, 1, 1, device="cuda", dtype=dtype, requires_grad=True),
              torch.randn(16, 16, 3, 3, device="cuda", dtype=dtype, requires_grad=True),
              torch.randn(32, 16, 4, 4, device="cuda", dtype=dtype, requires_grad=True)]
        native = sync_time(lambda: r1(lambda x, w, s, p: F.conv2d(x, w, None, s, p), x0, ws))
        fixed = sync_time(lambda: r1(lambda x, w, s, p: GradfixConv.apply(x, w, s, p), x0, ws))
        # Same gradients?
        for w in ws:
            w.grad = None
        r1(lambda x, w, s, p: F.conv2d(x, w, None, s, p), x0, ws)
        ref = [w.grad.clone() for w in ws]
        for w in ws:
            w.grad = None
        r1(lambda x, w, s, p: GradfixConv.apply(x, w, s, p), x0, ws)
        err = max(((w.grad.float() - r.float()).abs().max() / r.float().abs().max()).item()
                  for w, r in zip(ws, ref))
        print(f"double backward, 3 D layers at 1024, batch 16, {str(dtype)[6:]}: "
              f"native {native * 1e3:.1f} ms, gradfix {fixed * 1e3:.1f} ms, "
              f"speedup {native / fixed:.1f}x, max rel diff {err:.2e}", flush=True)


WORKSPACE_CHILD = r"""
import os, sys, torch, torch.nn.functional as F
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = sys.argv[1] == "1"
x = torch.randn(16, 256, 129, 129, device="cuda", requires_grad=True)
w = torch.randn(256, 256, 3, 3, device="cuda", requires_grad=True)
torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
base = torch.cuda.memory_allocated()
import time
t = time.perf_counter()
for _ in range(3):
    y = F.conv2d(x, w, None, 1, 2, 2)  # dilated, as ASPP
    y.sum().backward()
torch.cuda.synchronize()
first = time.perf_counter() - t
t = time.perf_counter()
for _ in range(5):
    y = F.conv2d(x, w, None, 1, 2, 2); y.sum().backward()
torch.cuda.synchronize()
print(f"{(torch.cuda.max_memory_allocated() - base) / 2**30:.2f} GiB above the tensors, "
      f"first 3 steps {first:.2f} s, then {(time.perf_counter() - t) / 5 * 1e3:.1f} ms a step")
"""


def question_workspace():
    for label, bench, cap in (("benchmark on", "1", None), ("benchmark on, WSCAP 1024 MiB", "1", "1024"),
                              ("benchmark on, WSCAP 256 MiB", "1", "256"), ("benchmark off", "0", None)):
        env = dict(os.environ)
        if cap:
            env["CUDNN_CONV_WSCAP_DBG"] = cap
        out = subprocess.run([sys.executable, "-c", WORKSPACE_CHILD, bench], env=env,
                             capture_output=True, text=True, timeout=120)
        line = (out.stdout.strip() or out.stderr.strip().splitlines()[-1])
        print(f"fp32 dilated conv 256ch 129x129 batch 16, {label}: {line}", flush=True)


if __name__ == "__main__":
    print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(),
          torch.cuda.get_device_name(), flush=True)
    question_double_backward()
    question_workspace()
