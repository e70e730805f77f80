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

Attention: Hugging Face's default implementation (`--attention fused`: PyTorch's
scaled_dot_product_attention where torch has it; the record names the one used), or
`--attention stored`: HF's "eager" attention, the explicit softmax and dropout whose
probabilities autograd keeps, as gpubench's default `model.attention: stored` and
google-research/bert do.

--compile trains the model through torch.compile (the optimizer stays eager): issue 11's
strongest peer; its compile runs in the warm-up.

Usage: bert_reference.py --batch N --precision fp32|amp-bf16 [--json OUT] [--min-steps 10]
       [--min-seconds 5] [--model pretraining|mlm|squad] [--attention fused|stored] [--compile]
"""
import argparse
import os
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (the shared timing harness, a sibling module)


def build(kind, device, attention="fused"):
    # fused: Hugging Face's default (sdpa where torch has it), as the earlier runs measured.
    extra = {} if attention == "fused" else {"attn_implementation": "eager"}
    config = transformers.BertConfig(hidden_act="gelu" if kind == "mlm" else "gelu_new", **extra)
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
    harness.add_precision_arg(p)
    p.add_argument("--model", default="pretraining", choices=["pretraining", "mlm", "squad"])
    harness.add_attention_arg(p)
    harness.add_compile_arg(p)
    harness.add_window_args(p)
    p.add_argument("--json")
    a = p.parse_args()

    device = torch.device("cuda")
    amp = harness.set_precision(a.precision)
    torch.manual_seed(0)
    model, config = build(a.model, device, a.attention)
    if a.attention == "stored" and model.config._attn_implementation != "eager":
        sys.exit(f"bert_reference: asked for stored attention, but transformers "
                 f"{transformers.__version__} built '{model.config._attn_implementation}'")
    decay = [p for n, p in model.named_parameters() if not ("bias" in n or "LayerNorm" in n)]
    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "LayerNorm" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-4, eps=1e-6)
    scaler = harness.grad_scaler(amp)
    forward = harness.compile_model(model, a.compile)
    if a.model == "squad":
        inputs, types, attention, starts, ends = squad_batch(config, a.batch, device)
    else:
        inputs, types, labels, nsp = batch(config, a.batch, device)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    last = {}

    def step():
        opt.zero_grad(set_to_none=True)
        with harness.autocast(amp):
            if a.model == "squad":
                out = forward(input_ids=inputs, token_type_ids=types, attention_mask=attention,
                            start_positions=starts, end_positions=ends)
            elif a.model == "pretraining":
                out = forward(input_ids=inputs, token_type_ids=types, labels=labels,
                              next_sentence_label=nsp)
            else:
                out = forward(input_ids=inputs, token_type_ids=types, labels=labels)
        scaler.scale(out.loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        last["loss"] = out.loss.detach()

    timing = harness.time_steps(step, a.min_steps, a.min_seconds, losses=lambda: last)
    result = {
        "reference": f"transformers {transformers.__version__} {type(model).__name__}",
        **harness.environment(), "batch": a.batch,
        "precision": a.precision, "trainable_params": params,
        "attention": f"{a.attention} ({model.config._attn_implementation})",
        "compile": a.compile,
        **harness.summarize(timing, a.batch * len(timing.times_ms), "examples/s"),
    }
    return harness.finish(result, a.json)


if __name__ == "__main__":
    sys.exit(main())
