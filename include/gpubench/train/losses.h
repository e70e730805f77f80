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
SmoothedLoss label_smoothed_nll_loss(const torch::Tensor& logits, const torch::Tensor& target,
                                     double epsilon, int64_t ignore_index,
                                     bool fp32_log_softmax = false);

}  // namespace gpubench::train
