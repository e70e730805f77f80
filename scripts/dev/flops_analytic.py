#!/usr/bin/env python3
"""Analytic training FLOPs per unit of gpubench's workloads, layer by layer from configs/models.

The derivations of docs/workloads/<name>.md ("FLOPs per ..."), as code, so that they can be
checked against the counted FLOPs of one step (tests/flops_test.cpp, FlopCount.WorkloadStep,
scripts/dev/count_flops.sh). Conventions (docs/workloads/bert-base.md): multiply-adds (MACs) of
convolutions and matrix products only, 2 FLOPs per MAC; a backward pass costs one forward for
each of the input gradient and the weight gradient it computes.

  scripts/dev/flops_analytic.py deeplabv3                       # full size, per unit
  scripts/dev/flops_analytic.py pix2pixhd --set '{"height": 128, "width": 256}' --batch 1
  scripts/dev/flops_analytic.py unsupmt --batch-info info.json   # batch_info of the counted step
"""
import argparse
import json
import math
import os
import statistics
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def conv(h, w, cin, cout, k, stride=1, pad=None, dil=1, groups=1):
    """(MACs, out_h, out_w) of a 2-D convolution on h x w (square kernel)."""
    if pad is None:
        pad = (dil * (k - 1)) // 2
    oh = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dil * (k - 1) - 1) // stride + 1
    return oh * ow * cout * (cin // groups) * k * k, oh, ow


# ---- deeplabv3: Xception-65 + separable ASPP + decoder (models/deeplab.cpp) ----

def deeplabv3(m, batch):
    s = m["image_size"]
    out = {}
    first, h, w = conv(s, s, 3, 32, 3, 2, 1)          # conv1_1 (the image needs no gradient)
    c2, h, w = conv(h, w, 32, 64, 3)
    stem = first + c2

    def sep(h, w, cin, cout, stride=1, rate=1):
        # depthwise 3x3 (TF 'SAME' / fixed padding: k_eff - 1 in total) + pointwise 1x1
        k_eff = 3 + 2 * (rate - 1)
        oh, ow = (h + k_eff - 1 - k_eff) // stride + 1, (w + k_eff - 1 - k_eff) // stride + 1
        return oh * ow * cin * 9 + oh * ow * cin * cout, oh, ow

    target = m["output_stride"] // 2
    current, rate = 1, 1
    units = [(64, [128, 128, 128], "conv", 2, [1, 1, 1]), (128, [256, 256, 256], "conv", 2, [1, 1, 1]),
             (256, [728, 728, 728], "conv", 2, [1, 1, 1])]
    units += [(728, [728, 728, 728], "sum", 1, [1, 1, 1])] * m["middle_blocks"]
    units += [(728, [728, 1024, 1024], "conv", 2, [1, 1, 1]),
              (1024, [1536, 1536, 2048], "none", 1, m["multi_grid"])]
    backbone, low = 0, None
    for i, (cin, depths, shortcut, stride, grid) in enumerate(units):
        if current == target:
            r, st = rate, 1
            rate *= stride
        else:
            r, st = 1, stride
            current *= stride
        hin, win = h, w
        c = cin
        for j, d in enumerate(depths):
            macs, h, w = sep(h, w, c, d, st if j == 2 else 1, r * grid[j])
            backbone += macs
            c = d
            if i == 1 and j == 1:
                low = (h, w)
        if shortcut == "conv":
            macs, _, _ = conv(hin, win, cin, depths[2], 1, st, 0)
            backbone += macs
    out["backbone (Xception-65)"] = stem + backbone
    aspp = h * w * 2048 * 256 * 2  # 1x1 branch and the projection's share below
    aspp = h * w * 2048 * 256                                   # 1x1 branch
    aspp += 3 * (h * w * 2048 * 9 + h * w * 2048 * 256)         # three separable atrous branches
    aspp += 2048 * 256                                          # image pooling 1x1 on 1x1
    aspp += h * w * 5 * 256 * 256                               # projection 1280 -> 256
    out["ASPP"] = aspp
    lh, lw = low
    dec = lh * lw * 256 * 48                                     # low-level projection
    dec += lh * lw * (304 * 9 + 304 * 256) + lh * lw * (256 * 9 + 256 * 256)
    out["decoder"] = dec
    out["logits"] = lh * lw * 256 * m["num_classes"]
    fwd = sum(out.values())
    # backward: input and weight gradients everywhere but conv1_1's input (the image)
    train = 3 * fwd - first
    return out, fwd, 2 * train


# ---- stylegan: G (mapping + synthesis) and D_basic (models/stylegan_modules.cpp) ----

def stylegan_nets(m):
    R = int(math.log2(m["resolution"]))
    nf = lambda stage: min(m["fmap_base"] // (2 ** stage), m["fmap_max"])
    fused = lambda res: (2 ** res) >= m["fused_scale_min_res"]
    d, z = m["dlatent_size"], m["latent_size"]
    layers = 2 * R - 2
    mapping = z * m["mapping_fmaps"] + (m["mapping_layers"] - 2) * m["mapping_fmaps"] ** 2 + m["mapping_fmaps"] * d
    styles = sum(d * 2 * nf(l // 2 + 1) for l in range(layers))
    synth = 16 * nf(1) * nf(1) * 9                                  # conv4
    g_blur = d_blur = 0
    for res in range(3, R + 1):
        r = 2 ** res
        cin, cout = nf(res - 2), nf(res - 1)
        synth += r * r * cin * cout * (4 if fused(res) else 9)      # fused: 4x4 transposed, stride 2
        if m["blur"]:
            synth += r * r * cout * 9                               # [1 2 1] blur as a convolution
            g_blur += r * r * cout * 9
        synth += r * r * cout * cout * 9
    to_rgb = 4 ** R * nf(R - 1) * m["num_channels"]
    G = {"mapping": mapping, "styles": styles, "synthesis": synth, "to_rgb": to_rgb}
    from_rgb = 4 ** R * m["num_channels"] * nf(R - 1)
    dblocks = 0
    for res in range(R, 2, -1):
        r = 2 ** res
        c0, c1 = nf(res - 1), nf(res - 2)
        dblocks += r * r * c0 * c0 * 9
        if m["blur"]:
            dblocks += r * r * c0 * 9
            d_blur += r * r * c0 * 9
        dblocks += r * r * c0 * c1 * (4 if fused(res) else 9)      # fused: 4x4 stride 2 (/4 outputs x 16)
    head = 16 * (nf(1) + 1) * nf(1) * 9 + nf(1) * 16 * nf(0) + nf(0)
    D = {"from_rgb": from_rgb, "blocks": dblocks, "conv4 + dense": head}
    return G, D, g_blur, d_blur


def stylegan(m, batch):
    G, D, g_blur, d_blur = stylegan_nets(m)
    Gf, Df = sum(G.values()), sum(D.values())
    mapping2 = G["mapping"]  # style mixing maps a second latent (the reference's graph always does)
    # D step: G forward (no grad); D on reals and fakes; R1's first-order input gradient of
    # D(reals) (input gradients only); the loss backward: D(fakes) weights + inputs but the
    # image's, D(reals) likewise, and the R1 term's double backward through the input-gradient
    # graph (weights and output gradients of each input-gradient convolution: 2 x its forward).
    # The blur's kernel is a buffer: no weight gradient, so its backward costs one forward.
    first_in = D["from_rgb"]
    # (the reals' input gradient is computed too: the graph was built while they required it)
    d_step = (Gf + mapping2) + 2 * Df + Df + (2 * Df - first_in - d_blur) + 2 * (2 * Df - d_blur)
    # G step: G forward, D forward on fakes, D input gradients (D frozen), G backward (weights
    # and inputs).
    g_step = (Gf + mapping2) + Df + Df + 2 * (Gf + mapping2) - g_blur
    out = {**{"G " + k: v for k, v in G.items()}, **{"D " + k: v for k, v in D.items()}}
    return out, Gf + Df, 2 * (d_step + g_step)


# ---- pix2pixhd: LocalEnhancer G + 3 PatchGAN D + frozen VGG19 (models/pix2pixhd.cpp) ----

def pix2pixhd_nets(m):
    H, W = m["height"], m["width"]
    cin = m["label_classes"] + (1 if m["instance_edges"] else 0)
    ngf, nd, nb = m["ngf"], m["global_downsamples"], m["global_blocks"]
    E = m["local_enhancers"]
    G, G_first = 0, 0
    # global generator at 1/2^E resolution with ngf * 2^E, no output layer
    h, w = H >> E, W >> E
    g = ngf << E
    macs, h, w = conv(h + 6, w + 6, cin, g, 7, 1, 0)
    G_first += macs
    G += macs
    for i in range(nd):
        macs, h, w = conv(h, w, g << i, g << (i + 1), 3, 2, 1)
        G += macs
    b = g << nd
    G += nb * 2 * h * w * b * b * 9
    for i in range(nd):
        width = b >> i
        G += h * w * width * (width // 2) * 9       # transposed 3x3 stride 2: input x Cout x 9
        h, w = 2 * h, 2 * w
    for n in range(1, E + 1):
        width = ngf << (E - n)
        lh, lw = H >> (E - n), W >> (E - n)
        macs, _, _ = conv(lh + 6, lw + 6, cin, width, 7, 1, 0)
        G_first += macs
        G += macs
        macs, h2, w2 = conv(lh, lw, width, 2 * width, 3, 2, 1)
        G += macs
        G += m["local_blocks"] * 2 * h2 * w2 * (2 * width) ** 2 * 9
        G += h2 * w2 * 2 * width * width * 9
        if n == E:
            G += lh * lw * ngf * m["output_channels"] * 49
    # 3 discriminators at 1, 1/2, 1/4 (avg-pool 3x3 s2 p1, count_include_pad false)
    dcin = cin + m["output_channels"]
    D, D_first = 0, 0
    h, w = H, W
    for s in range(m["discriminators"]):
        hh, ww = h, w
        width = m["ndf"]
        macs, hh, ww = conv(hh, ww, dcin, width, 4, 2, 2)
        D_first += macs
        D += macs
        for _ in range(1, m["discriminator_layers"]):
            prev, width = width, min(2 * width, 512)
            macs, hh, ww = conv(hh, ww, prev, width, 4, 2, 2)
            D += macs
        prev, width = width, min(2 * width, 512)
        macs, hh, ww = conv(hh, ww, prev, width, 4, 1, 2)
        D += macs
        macs, hh, ww = conv(hh, ww, width, 1, 4, 1, 2)
        D += macs
        h, w = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    # VGG19 features[0:30] (up to relu5_1): conv3x3 pad 1, 2x2 max pools
    V = 0
    h, w, c = H, W, m["output_channels"]
    for item in [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512]:
        if item == "M":
            h, w = h // 2, w // 2
        else:
            V += h * w * c * item * 9
            c = item
    return {"G": G, "G_first": G_first, "D": D, "D_first": D_first, "VGG": V}


def pix2pixhd(m, batch):
    n = pix2pixhd_nets(m)
    G, D, V = n["G"], n["D"], n["VGG"]
    # forward: G, D(fake detached), D(real), D(fake), VGG(fake), VGG(real) without gradient
    fwd = G + 3 * D + 2 * V
    # loss_G backward: D(fake) weights + inputs (2D; D's weight gradients are computed, then
    # zeroed), VGG(fake) inputs only (frozen: V), G weights + inputs but not the label map's
    # (2G - G_first); loss_D backward: D(fake detached), D(real): weights, inputs but the first
    # layer's (2D - D_first each).
    bwd = 2 * D + V + (2 * G - n["G_first"]) + 2 * (2 * D - n["D_first"])
    parts = {"G": G, "D (3 scales)": D, "VGG19": V}
    return parts, G + D + V, 2 * (fwd + bwd)


# ---- mt-dnn: BERT-Large + GLUE heads over the 24-step proportional cycle (models/mtdnn.cpp) ----

def glue_cycle(m, batch):
    sizes = m["task_train_sizes"]
    steps = m["cycle_steps"]
    total = sum(sizes)
    counts = [math.floor(steps * s / total) for s in sizes]
    rem = sorted(((steps * s / total - math.floor(steps * s / total), i) for i, s in enumerate(sizes)),
                 key=lambda x: -x[0])
    given = sum(counts)
    i = 0
    while given < steps:
        counts[rem[i][1]] += 1
        given += 1
        i += 1
    nd = statistics.NormalDist()
    lengths = []
    for t, k in enumerate(counts):
        ls = []
        for j in range(max(1, k)):
            q = (j + 0.5) / max(1, k)
            p = q ** (1.0 / max(batch, 1))
            z = nd.inv_cdf(p)
            length = round(m["task_length_median"][t] * math.exp(m["task_length_sigma"][t] * z))
            shortest = 5 if m["task_segments"][t] == 2 else 3
            ls.append(min(max(int(length), shortest), m["max_seq_length"]))
        lengths.append(ls)
    return counts, lengths


def bert_layer_macs(h, ff, L):
    """Per sequence of L tokens, one layer: Q, K, V, O, FFN, scores and context."""
    return L * (4 * h * h + 2 * h * ff) + 2 * L * L * h


def mt_dnn_step(m, task, L):
    h, ff, layers = m["hidden_size"], m["intermediate_size"], m["layers"]
    enc = layers * bert_layer_macs(h, ff, L)
    pooler = h * h
    head = m["task_heads"][task]
    classes = m["task_classes"][task]
    if head == "san":
        turns = m["san_turns"]
        # the initial state: query_wsum and its summary over the batch's longest first segment
        # (taken as L / 2: the split is drawn), then per turn: attention Linear(h, h), the scores
        # and summary bmm over L, the classifier 4h x classes, a GRUCell (6 h^2)
        head_macs = 2 * (L / 2) * h + turns * (h * h + 2 * L * h + 4 * h * classes + 6 * h * h)
        # the pooler runs but is not on the loss's graph: forward only
        return enc, head_macs, pooler, False
    return enc, h * classes, pooler, True


def mt_dnn(m, batch, info=None):
    counts, lengths = glue_cycle(m, batch)
    total_fwd, total_train, examples = 0, 0, 0
    for t, k in enumerate(counts):
        for j in range(k):
            L = lengths[t][j]
            enc, head, pooler, pooled_used = mt_dnn_step(m, t, L)
            f = enc + head + pooler
            # backward: everything on the loss's graph, weights and inputs (the embeddings'
            # gradient is a scatter, no MACs)
            on_graph = enc + head + (pooler if pooled_used else 0)
            total_fwd += batch * f
            total_train += batch * (f + 2 * on_graph)
            examples += batch
    parts = {"cycle counts": counts, "padded lengths": lengths,
             "mean padded length": sum(lengths[t][j] for t, k in enumerate(counts) for j in range(k)) / sum(counts)}
    return parts, total_fwd / examples, 2 * total_train / examples


# ---- unsupmt: XLM encoder-decoder, AE x 2 + BT x 2 (models/unsupmt*.cpp) ----

def unsupmt(m, batch, info):
    if info is None:
        sys.exit("unsupmt needs --batch-info (the batch_info line of the counted step)")
    d, f, nl, V = m["dim"], m["ffn_dim"], m["layers"], m["vocab_size"]

    def enc(B, S):
        return B * nl * (S * (4 * d * d + 2 * d * f) + 2 * S * S * d)

    def dec(B, S, Ss, words):
        per_layer = S * (4 * d * d + 2 * d * d + 2 * d * f) + 2 * S * S * d + 2 * S * Ss * d + Ss * 2 * d * d
        return B * nl * per_layer + words * d * V

    def generate(B, Ss, T):
        # T - 1 greedy steps over the whole batch, cached keys and values: per step and layer
        # q, k, v, o (4 d^2), cross-attention q and o (2 d^2), FFN, scores over t + 1 cached
        # positions and over the Ss source positions; source keys and values once; the
        # vocabulary projection of every position
        macs = B * nl * Ss * 2 * d * d
        for t in range(T - 1):
            macs += B * (nl * (6 * d * d + 2 * d * f + 2 * (t + 1) * d + 2 * Ss * d) + d * V)
        return macs

    b = info["batches"]
    fwd = train = 0
    for s in b[:2]:
        B, S, Sn, words = s["sentences"], s["max_len"], s["noised_max_len"], s["words"]
        x = enc(B, Sn) + dec(B, S, Sn, words)
        fwd += x
        train += 3 * x
    for s in b[2:]:
        B, S, words, T = s["sentences"], s["max_len"], s["words"], s["decode_len"]
        gen = enc(B, S) + generate(B, S, T)
        x = enc(B, T) + dec(B, S, T, words)  # the translation (padded to T) is the source
        fwd += gen + x
        train += gen + 3 * x
    words = info["words_per_step"]
    return {"words per step": words}, fwd / words, 2 * train / words


# ---- mask-rcnn: R-50-FPN, RPN, box and mask heads on the batch's RoI slots (models/mask_rcnn*.cpp) ----

def mask_rcnn_slots(m, images):
    """The heads' slot counts as MaskRcnnImpl::roi_slots sizes them (roi_heads per_batch)."""
    g = m["gt_boxes_per_image"]
    # proposals per image: FPN_POST_NMS_TOP_N, bounded by the levels' candidates (not binding at
    # 800 x 1344; MaskRcnnImpl::roi_slots); over the batch when fpn_post_nms_per_batch
    div = m["size_divisibility"]
    H = -(-m["image_height"] // div) * div
    W = -(-m["image_width"] // div) * div
    levels = [(H >> l, W >> l) for l in range(2, 6)]
    levels.append(((levels[-1][0] + 1) // 2, (levels[-1][1] + 1) // 2))  # P6
    per_level = max(min(m["pre_nms_top_n"], h * w * len(m["aspect_ratios"])) for h, w in levels)
    per_image = min(m["fpn_post_nms_top_n"], len(levels) * per_level)
    proposals = min(m["fpn_post_nms_top_n"], images * per_image) if m["fpn_post_nms_per_batch"] else images * per_image
    samples = min(m["roi_batch_per_image"], per_image + g)
    positive_cap = min(int(m["roi_batch_per_image"] * m["roi_positive_fraction"]), per_image + g)
    mask_per_image = min(m["mask_rois_per_image"], positive_cap)

    def bound(per):
        gg = min(per, g)
        return images * gg + min(proposals, images * (per - gg))
    if m.get("roi_heads", "per_batch") == "per_batch":
        return bound(samples), bound(mask_per_image)
    return images * samples, images * mask_per_image


def mask_rcnn(m, batch):
    div = m["size_divisibility"]
    H = -(-m["image_height"] // div) * div
    W = -(-m["image_width"] // div) * div
    frozen = 0      # stem and res2: forward only (frozen weights, inputs without gradient)
    no_input_grad = 0  # layers whose input needs no gradient: weight gradient only
    trained = 0
    macs, h, w = conv(H, W, 3, m["stem_channels"], 7, 2, 3)
    frozen += macs
    h, w = (h + 2 - 3) // 2 + 1, (w + 2 - 3) // 2 + 1     # max pool 3x3 s2 p1
    cin, out, width = m["stem_channels"], m["res2_channels"], m["width_per_group"]
    sizes, chans = [], []
    for s, blocks in enumerate(m["blocks"]):
        for b in range(blocks):
            stride = 2 if (s > 0 and b == 0) else 1
            s1 = stride if m["stride_in_1x1"] else 1
            c1, h1, w1 = conv(h, w, cin, width, 1, s1, 0)
            c2, h2, w2 = conv(h1, w1, width, width, 3, stride // s1, 1)
            c3, _, _ = conv(h2, w2, width, out, 1, 1, 0)
            ds = conv(h, w, cin, out, 1, stride, 0)[0] if cin != out else 0
            if s == 0:
                frozen += c1 + c2 + c3 + ds
            elif s == 1 and b == 0:  # its input, res2's output, needs no gradient
                no_input_grad += c1 + ds
                trained += c2 + c3
            else:
                trained += c1 + c2 + c3 + ds
            h, w, cin = h2, w2, out
        sizes.append((h, w))
        chans.append(out)
        out *= 2
        width *= 2
    backbone = frozen + no_input_grad + trained
    F = m["fpn_channels"]
    fpn_lateral2 = sizes[0][0] * sizes[0][1] * chans[0] * F
    fpn = sum(hh * ww * c * F for (hh, ww), c in zip(sizes[1:], chans[1:]))
    fpn += sum(hh * ww * F * F * 9 for hh, ww in sizes)
    p6 = ((sizes[3][0] - 1) // 2 + 1, (sizes[3][1] - 1) // 2 + 1)
    A = len(m["aspect_ratios"])
    rpn = sum(hh * ww * (F * F * 9 + F * A + F * 4 * A) for hh, ww in sizes + [p6])
    box_slots, mask_slots = mask_rcnn_slots(m, batch)
    r, mr, d, C = m["box_resolution"], m["mask_resolution"], m["mlp_dim"], m["num_classes"]
    box = box_slots * (F * r * r * d + d * d + d * C + d * 4 * C)
    mask = 0
    c = F
    for ch in m["mask_conv_layers"]:
        mask += mr * mr * c * ch * 9
        c = ch
    mask += mr * mr * c * c * 4                       # ConvTranspose 2x2 stride 2: input x Cout x 4
    mask += (2 * mr) ** 2 * c * 1                     # the 1x1 logits of each RoI's own class only (class_logits: a bmm)
    mask *= mask_slots
    per_batch_train = batch * (frozen + (fpn_lateral2 + no_input_grad) * 2 + 3 * (trained + fpn + rpn)) + 3 * (box + mask)
    fwd = batch * (backbone + fpn_lateral2 + fpn + rpn) + box + mask
    parts = {"padded image": [H, W], "backbone (R-50)": backbone, "of it frozen (stem, res2)": frozen,
             "FPN": fpn_lateral2 + fpn, "RPN head": rpn, "box slots per batch": box_slots,
             "mask slots per batch": mask_slots, "box head per batch": box, "mask head per batch": mask}
    return parts, fwd / batch, 2 * per_batch_train / batch


def load(name):
    with open(os.path.join(ROOT, "configs", "models", name + ".yaml")) as fh:
        return yaml.safe_load(fh)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload")
    ap.add_argument("--set", default="{}", help="JSON merge over the model section")
    ap.add_argument("--batch", type=int, default=None, help="batch (default: the RTX 8000's 2020 batch)")
    ap.add_argument("--batch-info", default=None, help="file with the counted step's batch_info JSON")
    a = ap.parse_args()
    cfg = load(a.workload)
    m = dict(cfg["model"])
    m.update(json.loads(a.set))
    batch = a.batch or cfg.get("reference_2020", {}).get("max_batch", {}).get("quadro-rtx-8000", 1)
    info = None
    if a.batch_info:
        text = open(a.batch_info).read()
        lines = [l for l in text.splitlines() if l.startswith("batch_info ")]
        info = json.loads(lines[-1][len("batch_info "):] if lines else text)
    fn = {"deeplabv3": deeplabv3, "stylegan": stylegan, "pix2pixhd": pix2pixhd,
          "mt-dnn": lambda m, b: mt_dnn(m, b), "unsupmt": lambda m, b: unsupmt(m, b, info),
          "mask-rcnn": lambda m, b: mask_rcnn(m, b)}[a.workload]
    parts, fwd_macs, train_flops = fn(m, batch)
    print(json.dumps({"workload": a.workload, "batch": batch, "parts_forward_macs": parts,
                      "forward_macs_per_unit": fwd_macs, "train_flops_per_unit": train_flops}, indent=1))


if __name__ == "__main__":
    main()
