// The training step of fairseq's translation task (trainer.train_step, --update-freq 1) for any
// encoder-decoder whose forward(src_tokens, prev_output_tokens, src_padded) returns logits:
// label-smoothed cross-entropy summed over the target tokens and divided by ntokens (fairseq
// multiplies the gradients by 1 / sample_size, which is the same), then the update. Each step
// takes the next of the pre-generated token-budget batches. Used by transformer-big and
// conv-seq2seq.
#pragma once

#include "gpubench/precision.h"
#include "gpubench/train/losses.h"
#include "gpubench/train/update.h"
#include "gpubench/workload.h"
#include "models/token_batching.h"

#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gpubench::models {

/// One fairseq update on a token batch; returns the batch's ntokens (fairseq's wps unit).
template <typename Model>
class TranslationStep final : public TrainStep {
 public:
  /// `model` is on the device already and `updater` holds its parameters.
  TranslationStep(Model model, TokenBatches batches, train::Updater updater, const StepContext& ctx,
                  double label_smoothing)
      : model_(std::move(model)),
        batches_(std::move(batches)),
        updater_(std::move(updater)),
        precision_(ctx.precision),
        device_(ctx.device),
        max_tokens_(ctx.batch),
        label_smoothing_(label_smoothing) {}

  double run() override {
    const TokenBatch& batch = batches_.next();
    // Known on the host: the loss is normalized without reading anything from the device.
    const auto ntokens = static_cast<double>(batch.target_tokens);
    updater_.zero_grad();
    torch::Tensor loss;
    {
      AutocastGuard autocast(precision_, device_);
      const auto logits =
          model_->forward(batch.src_tokens, batch.prev_output_tokens, batch.src_padded);
      const auto smoothed =
          train::label_smoothed_nll_loss(logits, batch.target, label_smoothing_, kFairseqPad);
      loss = smoothed.loss / ntokens;
      nll_ = smoothed.nll_loss.detach() / ntokens;
    }
    loss_ = loss.detach();
    updater_.backward_and_step(loss);
    return ntokens;
  }

  std::map<std::string, torch::Tensor> losses() const override {
    return {{"loss", loss_}, {"nll_loss", nll_}};
  }

  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"model", model_->parameters()}};
  }

  Json batch_info() const override { return batches_.info(max_tokens_); }

  // Each step takes the next of the cycled batches, whose lengths differ: warm-up runs each
  // once, and the timed window covers whole cycles.
  int64_t warmup_steps() const override { return batches_.size(); }
  bool uniform_steps() const override { return false; }
  int64_t representative_steps() const override { return batches_.size(); }

 private:
  Model model_;
  TokenBatches batches_;
  train::Updater updater_;
  Precision precision_;
  torch::Device device_;
  int64_t max_tokens_;
  double label_smoothing_;
  torch::Tensor loss_, nll_;
};

}  // namespace gpubench::models
