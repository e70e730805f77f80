// The training step of fairseq's translation task (trainer.train_step, --update-freq 1) for any
// encoder-decoder whose forward(src_tokens, prev_output_tokens, src_padded) returns logits:
// label-smoothed cross-entropy summed over the target tokens and divided by ntokens (fairseq
// multiplies the gradients by 1 / sample_size, which is the same), then the update. Each step
// takes the next of the pre-generated token-budget batches. Used by transformer-big and
// conv-seq2seq.
#pragma once

#include "gpubench/train/losses.h"
#include "gpubench/train/runtime.h"
#include "gpubench/train/update.h"
#include "gpubench/train/workload.h"
#include "models/fast_paths.h"
#include "models/token_batching.h"

#include <torch/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpubench::models {

/// Forward multiply-adds of one sentence pair of `src` source and `tgt` target tokens (EOS
/// included), by the model's own formula.
using PairMacs = std::function<double(int64_t src, int64_t tgt)>;

/// The training FLOPs of one update on a token batch: every matrix product is on the loss's
/// graph (the embeddings' output needs a gradient), so each costs three forwards. Useful work
/// by default, each pair at its own lengths (no padding, as fairseq's wps counts words);
/// `padded`: every pair at the batch's longest source and target, which the device computes.
inline double token_batch_flops(const BatchShape& shape, const PairMacs& pair_macs,
                                bool padded = false) {
  double macs = 0;
  if (padded) {
    macs = static_cast<double>(shape.sentences()) * pair_macs(shape.src_max(), shape.tgt_max());
  } else {
    for (const SentencePair& p : shape.pairs) macs += pair_macs(p.src, p.tgt);
  }
  return 2 * 3 * macs;
}

/// One fairseq update on a token batch; returns the batch's ntokens (fairseq's wps unit).
template <typename Model>
class TranslationStep final : public train::RuntimeStep {
 public:
  /// `model` is on the device already and `updater` holds its parameters; `pair_macs` its
  /// FLOPs formula (none: the step derives no FLOPs).
  TranslationStep(Model model, TokenBatches batches, train::Updater updater, const StepContext& ctx,
                  double label_smoothing, PairMacs pair_macs = {})
      : RuntimeStep(ctx),
        pair_macs_(std::move(pair_macs)),
        model_(std::move(model)),
        batches_(std::move(batches)),
        updater_(runtime_.add("model", std::move(updater))),
        max_tokens_(ctx.batch),
        label_smoothing_(label_smoothing),
        fast_paths_(ctx.runtime.fast_paths),
        fused_loss_(ctx.runtime.fused_loss) {
    // The model's attention modules follow the setting (models/fast_paths.h).
    set_fast_paths(*model_, fast_paths_, fusions(ctx.runtime));
    std::vector<int64_t> order;  // the batches in turn; each batch is a captured variant
    for (int64_t i = 0; i < 2 * batches_.size(); ++i) order.push_back(i % batches_.size());
    warmup_steps_ = runtime_.warmup_steps(batches_.size(), order);
  }

  double run() override {
    last_batches_.clear();
    if (!probe_batches_.empty()) {
      // A search probe: every batch that may peak highest (TokenBatches::probe_batches()).
      const std::vector<int64_t> batches = std::exchange(probe_batches_, {});
      double units = 0;
      for (const int64_t index : batches) {
        next_ = index;
        batches_.seek(index);
        units += run_next();
      }
      return units;
    }
    return run_next();
  }

  // A one-run probe trains the batches that may peak highest, with the optimizer state in
  // place.
  bool prepare_probe() override {
    if (!RuntimeStep::prepare_probe()) return false;
    probe_batches_ = batches_.probe_batches();
    return true;
  }

  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"model", model_->parameters()}};
  }

  Json batch_info() const override { return batches_.info(max_tokens_); }

  // The batches the last run() trained, at their own lengths (token_batch_flops).
  std::optional<double> step_flops() const override { return flops(false); }
  std::optional<double> computed_step_flops() const override { return flops(true); }

  // Each step takes the next of the cycled batches, whose lengths differ: warm-up runs each
  // once (twice with CUDA graphs, which capture each batch on its second run), and the timed
  // window covers whole cycles.
  int64_t warmup_steps() const override { return warmup_steps_; }
  bool uniform_steps() const override { return false; }
  int64_t representative_steps() const override { return batches_.size(); }
  // Nothing builds per batch length in fp32 or tf32, eager: the models' convolutions are
  // conv_tbc, matrix products (no cuDNN autotuning), and fp32 attention does not go through
  // cuDNN (a three-step warm-up timed the same 31193 words/s as the whole cycle on the H200,
  // 2026-12-02). Under autocast each new length's first run took 1.3-2.9 s against 0.04-0.4 s
  // after (cuDNN's fused attention, built per shape: docs/results/2026-12-02-h200-speed-fp16),
  // and with CUDA graphs each batch is captured on its second run: both build per shape.
  bool builds_per_shape() const override {
    return runtime_.graphs_active() || is_amp(runtime_.precision());
  }

 private:
  std::optional<double> flops(bool padded) const {
    if (!pair_macs_ || last_batches_.empty()) return std::nullopt;
    double total = 0;
    for (const int64_t index : last_batches_) {
      total += token_batch_flops(batches_.shape(index), pair_macs_, padded);
    }
    return total;
  }

  /// One update on the next batch in turn.
  double run_next() {
    const int64_t index = next_;
    last_batches_.push_back(index);
    next_ = (next_ + 1) % batches_.size();
    const TokenBatch& batch = batches_.next();
    return runtime_.run(index, [&] {
      // Known on the host: the loss is normalized without reading anything from the device.
      const auto ntokens = static_cast<double>(batch.target_tokens);
      updater_.zero_grad();
      torch::Tensor loss, nll;
      {
        const auto autocast = runtime_.autocast();
        const auto logits =
            model_->forward(batch.src_tokens, batch.prev_output_tokens, batch.src_padded);
        const auto smoothed = train::label_smoothed_nll_loss(logits, batch.target, label_smoothing_,
                                                             kFairseqPad, fast_paths_,
                                                             fused_loss_);
        loss = smoothed.loss / ntokens;
        nll = smoothed.nll_loss.detach() / ntokens;
      }
      runtime_.record_loss("loss", loss);
      runtime_.record_loss("nll_loss", nll);
      runtime_.backward(updater_, loss);
      runtime_.update(updater_);
      return ntokens;
    });
  }

  PairMacs pair_macs_;
  Model model_;
  TokenBatches batches_;
  train::Updater& updater_;
  int64_t max_tokens_;
  double label_smoothing_;
  bool fast_paths_;                     // runtime.fast_paths
  bool fused_loss_;                     // runtime.fused_loss
  int64_t next_ = 0;                    // the index of the batch batches_.next() returns
  std::vector<int64_t> last_batches_;   // the batches the last run() trained
  std::vector<int64_t> probe_batches_;  // set by prepare_probe(), trained by the next run()
  int64_t warmup_steps_ = 1;
};

}  // namespace gpubench::models
