// Shared losses against hand computations and PyTorch's own label smoothing.
#include "gpubench/train/losses.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>

namespace gpubench::train {
namespace {

TEST(LossesTest, LabelSmoothedNllMatchesFairseqByHand) {
  // Two positions over a vocabulary of 3, the second a pad (ignored).
  const auto logits =
      torch::tensor({0.0, std::log(2.0), std::log(5.0), 1.0, 2.0, 3.0}, torch::kDouble)
          .view({2, 3});
  const auto target = torch::tensor({2, 1}, torch::kLong);
  const auto out = label_smoothed_nll_loss(logits, target, 0.1, /*ignore_index=*/1);
  // p = (1, 2, 5) / 8 at the first position.
  const double nll = -std::log(5.0 / 8);
  const double smooth = -(std::log(1.0 / 8) + std::log(2.0 / 8) + std::log(5.0 / 8));
  EXPECT_NEAR(out.nll_loss.item<double>(), nll, 1e-6);
  EXPECT_NEAR(out.loss.item<double>(), 0.9 * nll + 0.1 / 3 * smooth, 1e-6);
}

TEST(LossesTest, LabelSmoothedNllEqualsCrossEntropyWithLabelSmoothingSummed) {
  torch::manual_seed(0);
  const auto logits = torch::randn({4, 5, 11});
  auto target = torch::randint(0, 11, {4, 5});
  target.index_put_({torch::indexing::Slice(), 4}, 1);
  const auto ours = label_smoothed_nll_loss(logits, target, 0.1, 1);
  const auto reference =
      torch::nn::functional::cross_entropy(logits.view({-1, 11}), target.view(-1),
                                           torch::nn::functional::CrossEntropyFuncOptions()
                                               .ignore_index(1)
                                               .label_smoothing(0.1)
                                               .reduction(torch::kSum));
  EXPECT_NEAR(ours.loss.item<double>(), reference.item<double>(), 1e-3);
}

}  // namespace
}  // namespace gpubench::train
