#!/usr/bin/env python3
"""Python eager references for the BERT workloads: Hugging Face transformers'
BertForPreTraining (bert-base), BertForMaskedLM (bert-base-mlm) or BertForQuestionAnswering
(bert-finetune) on the same GPU, batch and precision as a gpubench result, timed the way gpubench
times (warm-up until steady, then CUDA events around each step).

Like for like: strict fp32 (TF32 off in cuBLAS and cuDNN) or autocast bf16/fp16 around forward
and loss; BERT-Base with the TF original's tanh GELU ("gelu_new"); 128-token sequences with 20
masked positions and next-sentence labels; torch.optim.AdamW (bias-corrected, foreach) with
weight decay 0.01 off LayerNorm and bias, and gradient clipping at 1.0. Note the one layout
difference: HF computes masked-LM logits at all 128 positions (labels -100 elsewhere), where
google-research/bert (gpubench bert-base) gathers the 20 masked positions first; gpubench's
`lm_logits: all` setting is the like-for-like comparison.

For squad: 384-token features shaped like gpubench's (question 6-24 WordPieces, context
~N(160, 55), padding masked), the span loss, and the same AdamW; tanh GELU as run_squad.py.

Usage: bert_reference.py --batch N --precision fp32|amp-bf16 [--json OUT] [--min-steps 10]
       [--min-seconds 5] [--model pretraining|mlm|squad]
"""
import argparse
import json
import statistics
import sys
import time

import torch
import transformers


def build(kind, device):
    config = transformers.BertConfig(hidden_act="gelu" if kind == "mlm" else "gelu_new")
    cls = {"pretraining": transformers.BertForPreTraining, "mlm": transformers.BertForMaskedLM,
           "squad": transformers.BertForQuestionAnswering}[kind]
    model = cls(config).to(device).train()
    return model, config


def squad_batch(config, n, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    length = 384
    q = torch.randint(6, 25, (n, 1), generator=g)
    room = length - 3 - q
    c = (torch.randn(n, 1, generator=g) * 55 + 160).round().long()
    c = torch.maximum(torch.minimum(c, room), torch.full_like(room, 25))
    pos = torch.arange(length).expand(n, length)
    last = q + 2 + c
    ids = torch.randint(1000, config.vocab_size, (n, length), generator=g)
    ids[:, 0] = 101
    ids[pos == q + 1] = 102
    ids[pos == last] = 102
    ids[pos > last] = 0
    mask = (pos <= last).long()
    types = ((pos >= q + 2) & (pos <= last)).long()
    span = torch.minimum(torch.randint(1, 9, (n, 1), generator=g), c)
    start = q + 2 + (torch.rand(n, 1, generator=g) * (c - span + 1)).floor().long()
    end = start + span - 1
    return [t.to(device) for t in (ids, types, mask, start.squeeze(1), end.squeeze(1))]


def batch(config, n, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    length, masked = 128, 20
    ids = torch.randint(1000, config.vocab_size, (n, length), generator=g)
    a_len = torch.randint(8, length - 10, (n, 1), generator=g)
    pos = torch.arange(length).expand(n, length)
    ids[:, 0] = 101
    ids[pos == a_len + 1] = 102
    ids[:, -1] = 102
    types = (pos > a_len + 1).long()
    keys = torch.rand(n, length, generator=g)
    keys[(pos == 0) | (pos == a_len + 1) | (pos == length - 1)] = 2.0
    mpos = keys.topk(masked, dim=1, largest=False).indices
    labels = torch.full((n, length), -100).scatter(1, mpos, ids.gather(1, mpos))
    inputs = ids.scatter(1, mpos, torch.full_like(mpos, 103))
    nsp = torch.randint(0, 2, (n,), generator=g)
    return [t.to(device) for t in (inputs, types, labels, nsp)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "amp-bf16", "amp-fp16"])
    p.add_argument("--model", default="pretraining", choices=["pretraining", "mlm", "squad"])
    p.add_argument("--min-steps", type=int, default=10)
    p.add_argument("--min-seconds", type=float, default=5.0)
    p.add_argument("--json")
    a = p.parse_args()

    device = torch.device("cuda")
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    amp = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(a.precision)
    torch.manual_seed(0)
    model, config = build(a.model, device)
    decay = [p for n, p in model.named_parameters() if not ("bias" in n or "LayerNorm" in n)]
    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "LayerNorm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-4, eps=1e-6)
    scaler = torch.amp.GradScaler("cuda", enabled=amp == torch.float16)
    if a.model == "squad":
        inputs, types, attention, starts, ends = squad_batch(config, a.batch, device)
    else:
        inputs, types, labels, nsp = batch(config, a.batch, device)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            if a.model == "squad":
                out = model(input_ids=inputs, token_type_ids=types, attention_mask=attention,
                            start_positions=starts, end_positions=ends)
            elif a.model == "pretraining":
                out = model(input_ids=inputs, token_type_ids=types, labels=labels,
                            next_sentence_label=nsp)
            else:
                out = model(input_ids=inputs, token_type_ids=types, labels=labels)
        scaler.scale(out.loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()

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
        "reference": f"transformers {transformers.__version__} {type(model).__name__}",
        "torch": torch.__version__, "device": torch.cuda.get_device_name(), "batch": a.batch,
        "precision": a.precision, "trainable_params": params, "warmup_steps": len(warm),
        "steps": len(times), "step_time_ms_median": statistics.median(times),
        "throughput": a.batch * len(times) / window, "throughput_unit": "examples/s",
        "peak_memory_bytes": torch.cuda.max_memory_reserved(),
    }
    print(json.dumps(result, indent=2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
