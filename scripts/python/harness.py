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
    timing = harness.time_steps(step, a.min_steps, a.min_seconds)
    result = {"reference": ..., **harness.environment(), "batch": a.batch, ...,
              **harness.summarize(timing, a.batch * len(timing.times_ms), "examples/s")}
    harness.finish(result, a.json)
"""
import collections
import json
import statistics

PRECISIONS = ["fp32", "tf32", "amp-bf16", "amp-fp16"]


# ---- Command line ----

def add_precision_arg(parser):
    """--precision, as gpubench names them (default fp32)."""
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS)


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

Timing = collections.namedtuple("Timing", ["warmup_ms", "times_ms", "units"])
Timing.__doc__ = """What time_steps measured: the warm-up step times and the timed window's step
times, in milliseconds, and (counted=True) the sum of the window's step() results, else None."""


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


def time_steps(step, min_steps, min_seconds, max_warmup=50, counted=False):
    """Warm up, then time a window of training steps, the way gpubench times. Returns a Timing.

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
    times, units = timed(step, min_steps, counted)
    while sum(times) / 1000 < min_seconds:
        more, more_units = timed(step, min_steps, counted)
        times, units = times + more, units + more_units
    return Timing(warm, times, units if counted else None)


# ---- Result ----

def environment():
    """The result's torch version and GPU name."""
    import torch

    return {"torch": torch.__version__, "device": torch.cuda.get_device_name()}


def summarize(timing, units, unit):
    """The result's timing fields, in their order: warm-up and window step counts, the median
    step time (ms), throughput = units / the window's summed step times (units: the work the
    window did, e.g. batch x steps, or timing.units), its unit, and the peak memory torch's
    caching allocator reserved (read now, so call this right after timing)."""
    import torch

    window = sum(timing.times_ms) / 1000
    return {"warmup_steps": len(timing.warmup_ms), "steps": len(timing.times_ms),
            "step_time_ms_median": statistics.median(timing.times_ms),
            "throughput": units / window, "throughput_unit": unit,
            "peak_memory_bytes": torch.cuda.max_memory_reserved()}


def finish(result, json_path):
    """Print the result as indented JSON and, when json_path is given, write it there too."""
    print(json.dumps(result, indent=2))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)
