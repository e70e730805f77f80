// Stored attention's probabilities, dropout(softmax(scores + masks)) (issue 44 item 3's fused
// scale-mask-softmax-dropout; the scale is already in the scores' GEMM on the fast path). The
// plain path is ATen's add, softmax and dropout (with the casts amp puts between them); the fused
// one (runtime.fused_softmax) is one autograd function: on CUDA one kernel forward and one
// backward (src/train/attention_softmax_kernel.cu), on the CPU the same formulas in double. It
// keeps what ATen keeps for the backward (the probabilities in softmax's output type and the
// dropout's keep-mask), so the memory a batch needs, which the stored form exists to reproduce,
// is unchanged.
#pragma once

#include <torch/torch.h>

#include <optional>

namespace gpubench::train {

/// dropout(softmax(scores [-inf where `causal` masks key j > query i] + mask), p) by the fused
/// function, which must run (fused_attention_softmax_runs()): scores [batch, heads, q_len,
/// k_len], `mask` additive and broadcastable to them. The result is in the type the product with
/// v reads (the scores' type: under CUDA autocast softmax runs in fp32 and the product casts
/// back). Its dropout keeps elements by a mask drawn with bernoulli_: on the CPU the same draw as
/// ATen's dropout of the probabilities, on CUDA another than ATen's fused dropout (the same
/// probability). The plain path, ATen's ops, stays with its caller (models/attention.h).
torch::Tensor fused_attention_probs(const torch::Tensor& scores,
                                    const std::optional<torch::Tensor>& mask, bool causal,
                                    double dropout_p);

/// Whether the fused function runs for these: 4-d contiguous fp32, fp16 or bf16 scores at most
/// 1024 keys wide, a mask that broadcasts to them, under CUDA autocast scores of its type, and on
/// CUDA a build with gpubench's kernels; on the CPU not under autocast.
bool fused_attention_softmax_runs(const torch::Tensor& scores,
                                  const std::optional<torch::Tensor>& mask);

/// The fused function with its keep-mask given (uint8 of the scores' shape, 1 keeps; undefined
/// for no dropout), each kept probability times `keep_scale`. attention_probs draws the mask;
/// tests give the same one to both paths. Throws where fused_attention_softmax_runs() is false.
torch::Tensor fused_attention_softmax(const torch::Tensor& scores,
                                      const std::optional<torch::Tensor>& mask, bool causal,
                                      const torch::Tensor& keep, double keep_scale);

/// Whether this build has the fused softmax's CUDA kernels.
bool have_attention_softmax_kernels();

/// How many times the fused function has run in this process (forward calls, a CUDA graph's
/// replays not counted): the record says the fused softmax ran only where this grew.
int64_t fused_attention_softmax_calls();

}  // namespace gpubench::train
