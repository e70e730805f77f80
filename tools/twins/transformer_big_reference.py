#!/usr/bin/env python3
"""Python eager twin of gpubench's transformer-big, written with plain torch.nn, for the
side-by-side run on the same GPU, token budget and precision, timed the way gpubench times
(warm-up until steady, then CUDA events around each step).

Like for like with models/transformer.cpp:
- fairseq transformer_vaswani_wmt_en_de_big with --share-all-embeddings: 6+6 post-norm layers,
  1024 wide, FFN 4096, 16 heads, ReLU, dropout 0.3 (attention and activation dropout 0), one
  32768 x 1024 table for encoder input, decoder input and output projection, embeddings scaled
  by 32, fairseq's sinusoidal positions (sines then cosines, pad-aware positions from pad + 1);
  q/k/v projected by one Linear in self-attention (q, then k/v, in encoder attention) and
  F.scaled_dot_product_attention (causal in the decoder, source-padding mask only when a batch
  has source padding), or with --attention stored the explicit softmax(q k^T / sqrt(64) + mask)
  v whose probabilities autograd keeps, as gpubench's default `model.attention: stored` and
  fairseq's MultiheadAttention do;
- fairseq's label-smoothed cross-entropy (eps 0.1, fp32 log-softmax, summed, divided by the
  batch's ntokens);
- torch.optim.Adam (0.9, 0.98), eps 1e-8, foreach, with the inverse-sqrt schedule (warm-up 4000
  from 1e-7 to 5e-4); no clipping and no norm (clip-norm 0);
- the same token batches: the length distribution, corpus, batch_by_size, strata and order of
  models/token_batching.cpp, operation for operation (SplitMix64 draws; `--plan-only` prints the
  plan without torch), and the same word ids (torch.randint on a CPU generator seeded as the C++
  code seeds it); each step takes the next of the pre-generated batches;
- strict fp32 (TF32 off in cuBLAS and cuDNN), tf32, or autocast bf16/fp16 (GradScaler) around
  forward and loss.
Throughput is fairseq's wps: target tokens incl. EOS, without padding, per second.
--compile trains the model and its loss through torch.compile (the optimizer stays eager), the
peer issue 44 measures against. The batches differ in shape, so it compiles with dynamic shapes
(one static graph, then one dynamic graph on the first new shape) rather than once per shape;
both compiles run in the warm-up.

Usage: transformer_big_reference.py --tokens N --precision fp32|tf32|amp-bf16|amp-fp16
       [--attention fused|stored] [--compile] [--json OUT] [--min-steps 10] [--min-seconds 5]
       [--batches 8] [--seed 0]
       [--check GPUBENCH_RESULT.json] [--plan-only]
"""
import argparse
import bisect
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The shared timing harness, a sibling module; it imports torch only when called, so
# --plan-only still runs without torch.
import harness  # noqa: E402

PAD, EOS, FIRST_WORD = 1, 2, 4
MASK64 = (1 << 64) - 1

# The length profile of configs/models/transformer-big.yaml.
PROFILE = dict(src_mean=29.5, tgt_mean=30.6, max_len=130, max_ratio=0.0, sigma=0.55,
               ratio_sigma=0.2)


# ---- Token-budget batches (models/token_batching.cpp) ----

class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self):
        return float(self.next() >> 11) * 2.0 ** -53


def normal_cdf(x):
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def rounded_lognormal(first, last, scale, mu, sigma):
    weights, total = [], 0.0
    for k in range(first, last + 1):
        kd = float(k)
        upper = normal_cdf((math.log((kd + 0.5) / scale) - mu) / sigma)
        lower = 0.0 if k == 1 else normal_cdf((math.log((kd - 0.5) / scale) - mu) / sigma)
        weights.append(upper - lower)
        total += upper - lower
    return [w / total if total > 0 else 1.0 / len(weights) for w in weights]


def cumulative(pmf):
    out, s = [], 0.0
    for p in pmf:
        s += p
        out.append(s)
    return out


def mean_of(pmf, first):
    s = 0.0
    for i, p in enumerate(pmf):
        s += float(first + i) * p
    return s


def bisect_root(f, target, lo, hi):
    for _ in range(64):
        mid = 0.5 * (lo + hi)
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def draw(cdf, u):
    return min(bisect.bisect_right(cdf, u), len(cdf) - 1)


class LengthSampler:
    def __init__(self, p):
        self.p = p
        words = p["max_len"] - 1
        self.words = words
        self.ranges = [self.target_range(s) for s in range(1, words + 1)]
        src = lambda mu: rounded_lognormal(1, words, 1.0, mu, p["sigma"])
        mu = bisect_root(lambda m: mean_of(src(m), 1) + 1, p["src_mean"], -10.0, 10.0)
        self.src_pmf = src(mu)
        self.src_cdf = cumulative(self.src_pmf)

        def tables(ratio_mu):
            return [rounded_lognormal(first, last, float(s), ratio_mu, p["ratio_sigma"])
                    for s, (first, last) in zip(range(1, words + 1), self.ranges)]

        def tgt_mean(rows):
            s = 0.0
            for i, row in enumerate(rows):
                s += self.src_pmf[i] * mean_of(row, self.ranges[i][0])
            return s + 1

        ratio_mu = bisect_root(lambda m: tgt_mean(tables(m)), p["tgt_mean"], -5.0, 5.0)
        self.tgt_cdf = [cumulative(row) for row in tables(ratio_mu)]

    def target_range(self, s):
        words, r = self.p["max_len"] - 1, self.p["max_ratio"]
        if r == 0:
            return 1, words
        first = 1
        while first < words and float(first) * r < float(s):
            first += 1
        last = first
        while last < words and float(last + 1) <= float(s) * r:
            last += 1
        return first, last

    def sample(self, rng):
        s = draw(self.src_cdf, rng.uniform())
        t = draw(self.tgt_cdf[s], rng.uniform())
        src_words = s + 1
        return src_words + 1, self.ranges[s][0] + t + 1


def batch_by_size(pairs, max_tokens, multiple):
    batches, batch, sample_lens, sample_len = [], [], [], 0
    for pair in pairs:
        n = max(pair)
        sample_lens.append(n)
        sample_len = max(sample_len, n)
        assert sample_len <= max_tokens, "a sentence exceeds the token budget"
        size = len(batch)
        if size > 0 and (size + 1) * sample_len > max_tokens:
            keep = max(multiple * (size // multiple), size % multiple)
            batches.append(batch[:keep])
            batch, sample_lens = batch[keep:], sample_lens[keep:]
            sample_len = max(sample_lens)
        batch.append(pair)
    if batch:
        batches.append(batch)
    return batches


def plan_token_batches(profile, max_tokens, batches=8, multiple=8, seed=0, per_batch_corpus=16):
    sampler = LengthSampler(profile)
    per_batch = int(math.ceil(float(max_tokens) / profile["src_mean"]))
    corpus = max(4096, batches * per_batch_corpus * per_batch)
    rng = SplitMix64(seed)
    pairs = sorted(sampler.sample(rng) for _ in range(corpus))
    everything = batch_by_size(pairs, max_tokens, multiple)
    pick, m = SplitMix64(seed + 1), len(everything)
    chosen = []
    for j in range(batches):
        lo = j * m // batches
        hi = max((j + 1) * m // batches, lo + 1)
        chosen.append(everything[lo + pick.next() % (hi - lo)])
    bits = 0
    while (1 << bits) < batches:
        bits += 1
    reversed_bits = lambda j: int(format(j, f"0{bits}b")[::-1], 2) if bits else 0
    chosen = [chosen[j] for j in sorted(range(batches), key=reversed_bits)]
    weight = lambda b: len(b) * (max(p[0] for p in b) + 2 * max(p[1] for p in b))
    heaviest = max(range(len(chosen)), key=lambda i: weight(chosen[i]))
    if len(chosen) >= 2:
        chosen[1], chosen[heaviest] = chosen[heaviest], chosen[1]
    return chosen


def batch_info(shapes, max_tokens):
    """The keys of TokenBatches::info() in models/token_batching.cpp."""
    sentences = [len(b) for b in shapes]
    target = [sum(p[1] for p in b) for b in shapes]
    padded = [len(b) * max(max(p) for p in b) for b in shapes]
    k = float(len(shapes))
    return {"max_tokens": max_tokens, "batches": len(shapes),
            "sentences": sum(sentences) / k, "target_tokens": sum(target) / k,
            "budget_fill": sum(padded) / k / float(max_tokens),
            "sentences_per_batch": sentences, "target_tokens_per_batch": target,
            "padded_tokens_per_batch": padded,
            "src_max_len_per_batch": [max(p[0] for p in b) for b in shapes],
            "tgt_max_len_per_batch": [max(p[1] for p in b) for b in shapes]}


# ---- The model, loss and step (needs torch) ----

def build(torch, vocab=32768, d=1024, ffn=4096, heads=16, layers=6, dropout=0.3,
          max_positions=1024, attention="fused"):
    nn, F = torch.nn, torch.nn.functional

    class Attention(nn.Module):
        def __init__(self, self_attention):
            super().__init__()
            self.in_proj = nn.Linear(d, 3 * d if self_attention else d)
            self.kv_proj = None if self_attention else nn.Linear(d, 2 * d)
            self.out_proj = nn.Linear(d, d)
            for proj in (self.in_proj, self.kv_proj):
                if proj is not None:
                    for block in proj.weight.data.split(d, 0):
                        nn.init.xavier_uniform_(block, gain=1 / math.sqrt(2))
            nn.init.xavier_uniform_(self.out_proj.weight)
            nn.init.zeros_(self.out_proj.bias)

        def forward(self, x, memory, mask, causal):
            b, t, _ = x.shape
            hd = d // heads
            if self.kv_proj is None:
                q, k, v = self.in_proj(x).view(b, t, 3, heads, hd).permute(2, 0, 3, 1, 4)
            else:
                q = self.in_proj(x).view(b, t, heads, hd).transpose(1, 2)
                s = memory.shape[1]
                k, v = self.kv_proj(memory).view(b, s, 2, heads, hd).permute(2, 0, 3, 1, 4)
            if mask is not None:
                mask = mask.to(q.dtype)
            if attention == "fused":
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0,
                                                     is_causal=causal)
            else:  # stored: the probabilities stay in autograd's graph (attention dropout 0)
                scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
                if causal:
                    future = torch.ones(t, k.shape[-2], dtype=torch.bool,
                                        device=q.device).triu(1)
                    scores = scores.masked_fill(future, float("-inf"))
                if mask is not None:
                    scores = scores + mask
                out = torch.matmul(torch.softmax(scores, -1), v)
            return self.out_proj(out.transpose(1, 2).reshape(b, t, d))

    def linear(i, o):
        m = nn.Linear(i, o)
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)
        return m

    class EncoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn, self.self_attn_norm = Attention(True), nn.LayerNorm(d)
            self.fc1, self.fc2, self.final_norm = linear(d, ffn), linear(ffn, d), nn.LayerNorm(d)

        def forward(self, x, mask):
            p, train = dropout, self.training
            x = self.self_attn_norm(x + F.dropout(self.self_attn(x, x, mask, False), p, train))
            ff = self.fc2(F.relu(self.fc1(x)))
            return self.final_norm(x + F.dropout(ff, p, train))

    class DecoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn, self.self_attn_norm = Attention(True), nn.LayerNorm(d)
            self.encoder_attn, self.encoder_attn_norm = Attention(False), nn.LayerNorm(d)
            self.fc1, self.fc2, self.final_norm = linear(d, ffn), linear(ffn, d), nn.LayerNorm(d)

        def forward(self, x, enc, mask):
            p, train = dropout, self.training
            x = self.self_attn_norm(x + F.dropout(self.self_attn(x, x, None, True), p, train))
            x = self.encoder_attn_norm(
                x + F.dropout(self.encoder_attn(x, enc, mask, False), p, train))
            ff = self.fc2(F.relu(self.fc1(x)))
            return self.final_norm(x + F.dropout(ff, p, train))

    def sinusoidal(rows):
        half = d // 2
        step = math.log(10000.0) / (half - 1)
        freq = torch.exp(torch.arange(half, dtype=torch.float) * -step)
        angles = torch.arange(rows, dtype=torch.float).unsqueeze(1) * freq.unsqueeze(0)
        table = torch.cat([torch.sin(angles), torch.cos(angles)], 1)
        table[PAD] = 0
        return table

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab, d, padding_idx=PAD)
            nn.init.normal_(self.embed_tokens.weight, 0, d ** -0.5)
            with torch.no_grad():
                self.embed_tokens.weight[PAD].zero_()
            self.register_buffer("positions", sinusoidal(max_positions + PAD + 1))
            self.encoder_layers = nn.ModuleList(EncoderLayer() for _ in range(layers))
            self.decoder_layers = nn.ModuleList(DecoderLayer() for _ in range(layers))

        def embed(self, tokens):
            keep = tokens.ne(PAD).long()
            index = torch.cumsum(keep, 1) * keep + PAD
            x = self.embed_tokens(tokens) * math.sqrt(d) + self.positions[index]
            return F.dropout(x, dropout, self.training)

        def forward(self, src, prev, src_padded):
            mask = None
            if src_padded:
                b, s = src.shape
                mask = torch.zeros(b, 1, 1, s, device=src.device).masked_fill(
                    src.eq(PAD).view(b, 1, 1, s), float("-inf"))
            x = self.embed(src)
            for layer in self.encoder_layers:
                x = layer(x, mask)
            y = self.embed(prev)
            for layer in self.decoder_layers:
                y = layer(y, x, mask)
            return F.linear(y, self.embed_tokens.weight)

    return Transformer()


def label_smoothed_nll_loss(torch, logits, target, eps):
    """fairseq's label_smoothed_nll_loss (reduce=True), pads masked by a multiply."""
    lprobs = torch.log_softmax(logits.float(), -1).view(-1, logits.shape[-1])
    target = target.reshape(-1)
    keep = target.ne(PAD).float()
    nll = -lprobs.gather(1, target.unsqueeze(1)).squeeze(1)
    smooth = -lprobs.sum(1)
    nll_loss = (nll * keep).sum()
    return (1.0 - eps) * nll_loss + (eps / lprobs.shape[-1]) * (smooth * keep).sum()


def make_batch(torch, pairs, vocab, device, seed):
    """models/token_batching.cpp make_token_batch: same layout, same CPU generator draws."""
    g = torch.Generator().manual_seed(seed)
    n = len(pairs)
    s, t = max(p[0] for p in pairs), max(p[1] for p in pairs)
    src_len = torch.tensor([p[0] for p in pairs]).view(n, 1)
    tgt_len = torch.tensor([p[1] for p in pairs]).view(n, 1)
    src_pos, tgt_pos = torch.arange(s).view(1, s), torch.arange(t).view(1, t)
    src = torch.randint(FIRST_WORD, vocab, (n, s), generator=g)
    src = src.masked_fill(src_pos == s - 1, EOS).masked_fill(src_pos < s - src_len, PAD)
    tgt_pad = tgt_pos >= tgt_len
    target = torch.randint(FIRST_WORD, vocab, (n, t), generator=g)
    target = target.masked_fill(tgt_pos == tgt_len - 1, EOS).masked_fill(tgt_pad, PAD)
    prev = torch.cat([torch.full((n, 1), EOS), target[:, :t - 1]], 1).masked_fill(tgt_pad, PAD)
    return (src.to(device), prev.to(device), target.to(device), sum(p[1] for p in pairs),
            any(p[0] < s for p in pairs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, required=True, help="token budget (--max-tokens)")
    harness.add_precision_arg(ap)
    harness.add_attention_arg(ap)
    harness.add_compile_arg(ap)
    ap.add_argument("--batches", type=int, default=8, help="pre-generated batches, used in turn")
    ap.add_argument("--seed", type=int, default=0)
    harness.add_window_args(ap)
    ap.add_argument("--json")
    ap.add_argument("--check", help="a gpubench result file: compare its batch_info with ours")
    ap.add_argument("--plan-only", action="store_true", help="print the batch plan and exit")
    a = ap.parse_args()

    shapes = plan_token_batches(PROFILE, a.tokens, batches=a.batches, seed=a.seed)
    info = batch_info(shapes, a.tokens)
    if a.plan_only:
        print(json.dumps(info, indent=2))
        return 0
    if a.check:
        with open(a.check) as f:
            theirs = json.load(f)["jobs"][0]["batch_info"]
        same = all(theirs.get(k) == v for k, v in info.items() if k.endswith("_per_batch"))
        print(f"batch plan {'matches' if same else 'DIFFERS FROM'} {a.check}", file=sys.stderr)

    import torch

    device = torch.device("cuda")
    amp = harness.set_precision(a.precision)
    torch.manual_seed(a.seed)
    model = build(torch, attention=a.attention).to(device).train()
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)

    def model_loss(src, prev, src_padded, target):
        return label_smoothed_nll_loss(torch, model(src, prev, src_padded), target, 0.1)

    summed_loss = harness.compile_model(model_loss, a.compile, dynamic=None)
    opt = torch.optim.Adam(model.parameters(), lr=1e-7, betas=(0.9, 0.98), eps=1e-8,
                           weight_decay=0.0, foreach=True)
    scaler = harness.grad_scaler(amp)
    batches = [make_batch(torch, b, 32768, device, a.seed + 1 + i) for i, b in enumerate(shapes)]

    def inverse_sqrt(step, lr=5e-4, warmup=4000, init=1e-7):
        return init + (lr - init) * step / warmup if step < warmup else lr * math.sqrt(warmup / step)

    state = {"step": 0}
    last = {}

    def step():
        src, prev, target, ntokens, src_padded = batches[state["step"] % len(batches)]
        state["step"] += 1
        for group in opt.param_groups:  # gpubench's Updater: the rate of update n is schedule(n)
            group["lr"] = inverse_sqrt(state["step"])
        opt.zero_grad(set_to_none=True)
        with harness.autocast(amp):
            loss = summed_loss(src, prev, src_padded, target) / ntokens
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        last["loss"] = loss.detach()
        return ntokens

    # counted: each step returns its batch's target tokens (they vary by batch), summed over the
    # timed window for fairseq's wps.
    timing = harness.time_steps(step, a.min_steps, a.min_seconds, losses=lambda: last,
                                counted=True)
    result = {
        "reference": "torch.nn twin of fairseq transformer_vaswani_wmt_en_de_big",
        **harness.environment(),
        "batch": a.tokens, "batch_unit": "tokens", "precision": a.precision,
        "attention": a.attention, "compile": a.compile,
        "trainable_params": params, **harness.summarize(timing, timing.units, "words/s"),
        "batch_info": info,
    }
    return harness.finish(result, a.json)


if __name__ == "__main__":
    sys.exit(main())
