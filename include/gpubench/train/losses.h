// Losses that several workloads share, written as their reference codebases compute them.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace gpubench::train {

/// The summed loss and the summed negative log-likelihood it smooths.
struct SmoothedLoss {
  torch::Tensor loss;      ///< (1 - eps) * nll + eps / V * sum over the vocabulary of -log p
  torch::Tensor nll_loss;  ///< sum of -log p(target)
};

/// fairseq's label_smoothed_nll_loss (criterions/label_smoothed_cross_entropy.py) with
/// reduce=True: log-softmax in fp32 over the last dimension of `logits` [..., V], targets equal
/// to `ignore_index` left out, both terms summed (not averaged). Equal to PyTorch's
/// cross_entropy(label_smoothing=eps, reduction='sum', ignore_index). Padding is masked with a
/// multiply rather than fairseq's boolean indexing, which would read a count on the host.
/// `fp32_log_softmax` (runtime.fast_paths) has the log-softmax write fp32 from the logits as
/// they are, in place of an fp32 copy of them first: the same values (autocast's log_softmax
/// computes in fp32 either way); for fp16 logits on CUDA one kernel reads them directly, for
/// bf16 ATen still converts inside.
/// `fused` (runtime.fused_loss): the sums from vocab_loss_sums' fused path where it runs.
SmoothedLoss label_smoothed_nll_loss(const torch::Tensor& logits, const torch::Tensor& target,
                                     double epsilon, int64_t ignore_index,
                                     bool fp32_log_softmax = false, bool fused = false);

// ---- The vocabulary cross-entropy's two sums (issue 44 item 2) ----

/// Over the rows of `logits` [N, W] (the last dimension contiguous; W >= vocab, the columns past
/// `vocab` a padded projection's -inf) with `target` [N]: a [2] fp32 tensor of the summed
/// negative log-likelihood, sum_r -log p_r(t_r), and the summed smoothing term,
/// sum_r sum_{j < vocab} -log p_r(j), over the rows whose target is not `ignore_index`. Every
/// cross-entropy of the language models is these two sums and a scale: mean, smoothed or not.
/// `fused` false: ATen (log_softmax to fp32, a gather, a sum). `fused` true: one autograd
/// function that reads the logits once forward and once backward and writes their gradient in
/// their own type, with no fp32 copy of them (fused_vocab_loss_sums), where it runs
/// (fused_vocab_loss_runs(logits)); elsewhere the ATen path.
torch::Tensor vocab_loss_sums(const torch::Tensor& logits, const torch::Tensor& target,
                              int64_t vocab, int64_t ignore_index, bool fused);

/// Whether the fused function runs for `logits`: a CUDA tensor in a build with the kernels
/// (GPUBENCH_CUDA_KERNELS), or a CPU tensor (the same algorithm in plain loops, which the CPU
/// tests check against ATen); fp32, fp16 or bf16.
bool fused_vocab_loss_runs(const torch::Tensor& logits);

/// The fused function itself (vocab_loss_sums with `fused` where it runs); throws where it
/// does not.
torch::Tensor fused_vocab_loss_sums(const torch::Tensor& logits, const torch::Tensor& target,
                                    int64_t vocab, int64_t ignore_index);

/// Whether this build has the fused loss's CUDA kernels.
bool have_vocab_loss_kernels();

/// How many times the fused function has run in this process (forward calls, a CUDA graph's
/// replays not counted): the record says the fused loss ran only where this grew.
int64_t fused_vocab_loss_calls();

}  // namespace gpubench::train
