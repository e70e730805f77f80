"""The timing harness the Python eager references share, so that each of them times the way
gpubench times and they all time the same way: the precision setup, warm-up until steady, a timed
window with CUDA events around each step, the statistics and the result JSON.

The reference scripts import it as a sibling module. torch is imported inside the functions that
need it, so that a script may import this module and still run without torch
(transformer_big_reference.py --plan-only).

Typical use:

    amp = harness.set_precision(a.precision)            # before the model is built
    scaler = harness.grad_scaler(amp)
    def step():
        opt.zero_grad(set_to_none=True)
        with harness.autocast(amp):
            loss = ...
        scaler.scale(loss).backward()
        ...
    timing = harness.time_steps(step, a.min_steps, a.min_seconds, losses=lambda: last)
    result = {"reference": ..., **harness.environment(), "batch": a.batch, ...,
              **harness.summarize(timing, a.batch * len(timing.times_ms), "examples/s")}
    return harness.finish(result, a.json)   # 1 when a loss is not finite: no throughput

where step() leaves its losses, detached, in the dict `last` ({"loss": loss.detach(), ...}).
The harness reads them after the warm-up and after the timed window, outside the timed region,
and a run with any of them NaN or infinite reports no throughput: its result says
"status": "diverged" and names the losses, and the script exits with 1.
"""
import collections
import json
import math
import statistics
import sys

PRECISIONS = ["fp32", "tf32", "amp-bf16", "amp-fp16"]


# ---- Command line ----

def add_precision_arg(parser):
    """--precision, as gpubench names them (default fp32)."""
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)


def add_attention_arg(parser):
    """--attention fused|stored (default fused): the attention workloads' twins, as gpubench's
    `model.attention` names them. fused: PyTorch's scaled_dot_product_attention; stored: the
    explicit softmax whose probabilities autograd keeps (gpubench's default)."""
    parser.add_argument("--attention", default="fused", choices=["fused", "stored"])


def add_compile_arg(parser):
    """--compile: train the model through torch.compile (TorchInductor, default mode), issue 11's
    strongest peer. The optimizer step stays eager (its foreach kernels), as in eager runs; the
    compile happens in the first warm-up steps, which the warm-up rule keeps out of the window."""
    parser.add_argument("--compile", action="store_true")


def compile_model(model, enabled, dynamic=False):
    """torch.compile(model) when enabled, else model unchanged. Compiles with fixed shapes
    (dynamic=False) by default: the BERT references train one batch shape. A twin whose batches
    change shape passes dynamic=None (torch.compile's automatic dynamic shapes)."""
    if not enabled:
        return model
    import torch

    return torch.compile(model, dynamic=dynamic)


def add_window_args(parser):
    """--min-steps and --min-seconds: the least size of the timed window (see time_steps)."""
    parser.add_argument("--min-steps", type=int, default=10)
    parser.add_argument("--min-seconds", type=float, default=5.0)


# ---- Precision ----

def set_precision(precision, cudnn_benchmark=False):
    """Set torch's global math flags for a gpubench precision and return the autocast dtype
    (torch.bfloat16 for amp-bf16, torch.float16 for amp-fp16, None otherwise).

    TF32 is on in cuBLAS and cuDNN for tf32 only: fp32 is strict fp32, and the AMP precisions
    keep their fp32 ops strict. cudnn_benchmark=True turns cuDNN autotuning on (the
    convolutional references, as gpubench runs them); False leaves the flag as torch has it.
    """
    import torch

    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    return {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(precision)


def grad_scaler(amp):
    """A GradScaler with dynamic loss scaling under fp16 autocast, a pass-through otherwise."""
    import torch

    return torch.amp.GradScaler("cuda", enabled=amp == torch.float16)


def autocast(amp):
    """The autocast context for the forward pass and loss: amp's dtype, or off when amp is None."""
    import torch

    return torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None)


# ---- Timing ----

Timing = collections.namedtuple("Timing", ["warmup_ms", "times_ms", "units", "losses_start",
                                           "losses_end"])
Timing.__doc__ = """What time_steps measured: the warm-up step times and the timed window's step
times, in milliseconds, (counted=True) the sum of the window's step() results, else None, and
the losses of the step before the window and of the window's last step ({name: float})."""


def read_losses(losses):
    """{name: float} of losses(), a {name: tensor or number} of the last step (reading a tensor
    waits for the GPU, so call this outside a timed region)."""
    return {name: float(value) for name, value in losses().items()}


def non_finite(values):
    """The names of the NaN or infinite entries of a {name: float}, sorted."""
    return sorted(name for name, value in values.items() if not math.isfinite(value))


def timed(step, n, counted=False):
    """Run step() n times back to back with a CUDA event recorded before the first step and after
    each one; wait for the last event and return the n step times in milliseconds and the sum of
    what the steps returned (counted=True; 0 otherwise). The events are made before the first
    step, and nothing but step() and the record (and with counted, one addition) stands between
    two events."""
    import torch

    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
    units = 0
    events[0].record()
    if counted:
        for i in range(n):
            units += step()
            events[i + 1].record()
    else:
        for i in range(n):
            step()
            events[i + 1].record()
    events[-1].synchronize()
    return [events[i].elapsed_time(events[i + 1]) for i in range(n)], units


def steady(last, tolerance=0.05):
    """Whether every one of the last step times is within tolerance of their median."""
    median = statistics.median(last)
    return all(abs(t - median) <= tolerance * median for t in last)


def time_steps(step, min_steps, min_seconds, *, losses, max_warmup=50, counted=False):
    """Warm up, then time a window of training steps, the way gpubench times. Returns a Timing.

    losses: a function returning the last step's losses ({name: tensor}); they are read once
    after the warm-up (the losses the window starts from) and once after the window, both
    outside the timed region (summarize() checks them).

    Warm-up: one step at a time (each timed on its own), until the last three step times are all
    within 5% of their median, or max_warmup warm-up steps have run (at least three run).
    Window: min_steps steps timed together (timed()); while their times add up to less than
    min_seconds, another min_steps. So the window holds a multiple of min_steps steps.

    counted: step() returns the units of work it did (e.g. target tokens, which vary by batch),
    and Timing.units is their sum over the window (warm-up steps not counted). Without it step()
    returns nothing and the caller counts the work (e.g. batch x steps).
    """
    warm = []
    while len(warm) < 3 or not steady(warm[-3:]):
        warm += timed(step, 1, counted)[0]
        if len(warm) >= max_warmup:
            break
    profile(step)
    start = read_losses(losses)
    times, units = timed(step, min_steps, counted)
    while sum(times) / 1000 < min_seconds:
        more, more_units = timed(step, min_steps, counted)
        times, units = times + more, units + more_units
    return Timing(warm, times, units if counted else None, start, read_losses(losses))


def profile(step):
    """As gpubench does after its warm-up, outside the window: when GPUBENCH_PROFILE_TRACE names
    a file, GPUBENCH_PROFILE_STEPS steps (default 2) under torch.profiler (CPU operators and CUDA
    kernels), saved there as a Chrome trace that scripts/dev/gpu/trace_summary.py reads."""
    import os
    path = os.environ.get("GPUBENCH_PROFILE_TRACE")
    if not path:
        return
    import torch
    steps = max(1, int(os.environ.get("GPUBENCH_PROFILE_STEPS", "2") or 2))
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(path)
    print(f"profiled {steps} steps into {path}", file=sys.stderr)


# ---- Result ----

def environment():
    """The result's torch version and GPU name."""
    import torch

    return {"torch": torch.__version__, "device": torch.cuda.get_device_name()}


def summarize(timing, units, unit):
    """The result's timing fields, in their order: status ("ok", or "diverged" when a loss
    before or after the window is not finite, with a message naming it), warm-up and window
    step counts, the median step time (ms), throughput = units / the window's summed step times
    (units: the work the window did, e.g. batch x steps, or timing.units; None when diverged:
    a model whose losses are NaN does not do the reference's work), its unit, the peak memory
    torch's caching allocator reserved (read now, so call this right after timing), and the
    losses at the start and at the end of the window."""
    import torch

    window = sum(timing.times_ms) / 1000
    bad_start, bad_end = non_finite(timing.losses_start), non_finite(timing.losses_end)
    out = {"status": "diverged" if bad_start or bad_end else "ok"}
    if bad_start or bad_end:
        where = []
        if bad_start:
            where.append(f"{', '.join(bad_start)} before the timed window")
        if bad_end:
            where.append(f"{', '.join(bad_end)} at its end")
        out["message"] = ("diverged: not finite: " + "; ".join(where) +
                          "; no throughput is reported")
    out.update({"warmup_steps": len(timing.warmup_ms), "steps": len(timing.times_ms),
                "step_time_ms_median": statistics.median(timing.times_ms),
                "throughput": None if bad_start or bad_end else units / window,
                "throughput_unit": unit,
                "peak_memory_bytes": torch.cuda.max_memory_reserved(),
                "losses_start": timing.losses_start, "losses_end": timing.losses_end})
    return out


def finish(result, json_path):
    """Print the result as indented JSON and, when json_path is given, write it there too.
    Returns the script's exit code: 0, or 1 (with the message on stderr) when the result's
    status is "diverged". JSON has no NaN: non-finite losses are written as strings."""
    clean = _json_safe(result)
    print(json.dumps(clean, indent=2))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(clean, f, indent=2)
    if result.get("status") == "diverged":
        print(f"error: {result.get('message', 'diverged')}", file=sys.stderr)
        return 1
    return 0


def _json_safe(value):
    """value with every non-finite float replaced by its name ("nan", "inf", "-inf")."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value
