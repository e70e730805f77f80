#include "gpubench/train/losses.h"

#include <torch/torch.h>

namespace gpubench::train {

SmoothedLoss label_smoothed_nll_loss(const torch::Tensor& logits, const torch::Tensor& target,
                                     double epsilon, int64_t ignore_index, bool fp32_log_softmax,
                                     bool fused) {
  const int64_t vocab = logits.size(-1);
  if (fused && fused_vocab_loss_runs(logits)) {
    const auto sums = fused_vocab_loss_sums(logits.reshape({-1, vocab}), target.reshape({-1}),
                                            vocab, ignore_index);
    SmoothedLoss out;
    out.nll_loss = sums[0];
    out.loss = (1.0 - epsilon) * sums[0] + (epsilon / static_cast<double>(vocab)) * sums[1];
    return out;
  }
  const auto lprobs = (fp32_log_softmax ? torch::log_softmax(logits, -1, torch::kFloat)
                                        : torch::log_softmax(logits.to(torch::kFloat), -1))
                          .view({-1, vocab});
  const auto flat_target = target.reshape({-1});
  const auto keep = flat_target.ne(ignore_index).to(torch::kFloat);
  const auto nll = -lprobs.gather(1, flat_target.unsqueeze(1)).squeeze(1);
  const auto smooth = -lprobs.sum(1);
  SmoothedLoss out;
  out.nll_loss = (nll * keep).sum();
  const auto smooth_loss = (smooth * keep).sum();
  out.loss = (1.0 - epsilon) * out.nll_loss + (epsilon / static_cast<double>(vocab)) * smooth_loss;
  return out;
}

}  // namespace gpubench::train
