// MT-DNN (Liu et al. 2019) as namisan/mt-dnn's GLUE recipe (scripts/run_mt_dnn.sh) trains it:
// a BERT-Large shared encoder (pytorch-pretrained-bert: erf GELU) and eight task heads, SAN
// answer modules on MNLI, RTE, QQP, QNLI and MRPC, dropout + linear on SST-2 and CoLA, linear
// regression on STS-B. Each step draws one task in proportion to the tasks' training-set sizes
// and trains on a batch of that task's sentence pairs, padded to the batch's longest; cross-
// entropy (MSE for STS-B), global-norm clipping at 1.0, BERT-style Adamax with warm-up.
// Spec: shared/specs/language-workloads.md §6.
#pragma once

#include "gpubench/base/params.h"
#include "gpubench/train/workload.h"
#include "models/bert.h"
#include "models/linear.h"

#include <torch/nn.h>

#include <string>
#include <vector>

namespace gpubench::models {

/// Dropout as mt-dnn's DropoutWrapper applies it: on [B, L, H] one mask per sequence and
/// feature, shared across positions (variational); plain dropout on [B, H].
torch::Tensor variational_dropout(const torch::Tensor& x, double p, bool training);

/// Options of one SAN answer module (module/san.py, answer_opt 1).
struct SanOptions {
  SanOptions(int64_t hidden, int64_t classes) : hidden_(hidden), classes_(classes) {}
  /// Width of the encoder output. Default: none
  TORCH_ARG(int64_t, hidden);
  /// Output classes.
  TORCH_ARG(int64_t, classes);
  /// Reasoning turns (answer_num_turn). Default: 5
  TORCH_ARG(int64_t, turns) = 5;
  /// Stochastic turn dropout (answer_mem_drop_p). Default: 0.1
  TORCH_ARG(double, memory_dropout) = 0.1;
  /// The task's dropout, applied as mt-dnn's DropoutWrapper. Default: 0.1
  TORCH_ARG(double, dropout) = 0.1;
};

/// Stochastic answer network: a linear self-attention summary of the first segment starts the
/// state; each turn attends over the second segment with a bilinear score, classifies
/// [x, h, |x - h|, x * h], and updates the state with a GRU cell; the per-turn probabilities
/// are averaged under a random turn mask and returned as log-probabilities.
class SanClassifierImpl : public torch::nn::Module {
 public:
  explicit SanClassifierImpl(const SanOptions& options);
  /// x [B, L, H] with x_mask [B, L] (true = not attended); h [B, Lh, H] with h_mask [B, Lh].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& h, const torch::Tensor& x_mask,
                        const torch::Tensor& h_mask);

  SanOptions options;
  Linear query_wsum{nullptr}, attention{nullptr}, classifier{nullptr};
  torch::nn::GRUCell rnn{nullptr};
};
TORCH_MODULE(SanClassifier);

/// One GLUE task as the model and the synthetic data see it.
struct GlueTask {
  std::string name;           ///< "mnli"
  std::string head;           ///< "san" | "linear" | "regression"
  int64_t classes = 2;        ///< 1 for regression
  double dropout = 0.1;       ///< the task's dropout_p
  int64_t train_size = 0;     ///< training examples: the sampling weight
  int64_t segments = 2;       ///< 2 for sentence pairs, 1 for single sentences
  double length_median = 40;  ///< WordPieces of an example, specials included
  double length_sigma = 0.4;  ///< log-normal spread
};

/// The tasks of a resolved `model:` section.
std::vector<GlueTask> glue_tasks(const Params& model);

/// The longest example one epoch of the task holds: the length distribution's quantile at
/// 1 - 1/train_size, capped at max_length. The batch with the most memory pads to it.
int64_t longest_example(const GlueTask& task, int64_t max_length);

/// Task draws in proportion to `weights`, spread evenly (smooth weighted round robin): every prefix
/// holds each task within one draw of its share and any run of consecutive draws within two, so
/// a short timed window sees the epoch's mix. Deterministic.
std::vector<int64_t> proportional_schedule(const std::vector<double>& weights, int64_t length);

/// `steps` split in proportion to `weights` (largest remainders; ties to the earlier task).
std::vector<int64_t> apportion(const std::vector<double>& weights, int64_t steps);

/// The padded length of a batch of `batch` examples of `task` whose longest example sits at
/// quantile `q` of the distribution of the longest of `batch` draws: median x exp(sigma x z)
/// with z = Phi^-1(q^(1/batch)), rounded, between the task's shortest example and max_length.
int64_t batch_padded_length(const GlueTask& task, int64_t batch, double q, int64_t max_length);

/// The batches one timed cycle of mt-dnn trains on. Each task draws `counts[t]` steps of the
/// cycle (in proportion to its training set, or once each for the `cycle` order), spread
/// evenly (proportional_schedule); its j-th draw is its own batch, padded to the quantile
/// (j + 0.5) / counts[t] of the longest-of-batch distribution (batch_padded_length). So every
/// cycle pads as an epoch of random batches does on average, the same for every seed: the
/// seed draws the tokens and the shorter examples, not the padded lengths. A task with no draw
/// in the cycle still gets one batch (at the median), for the warm-up.
struct GlueCycle {
  std::vector<int64_t> counts;                     ///< per task: draws in one cycle
  std::vector<std::vector<int64_t>> lengths;       ///< per task: padded length of each batch
  std::vector<std::pair<int64_t, int64_t>> steps;  ///< the cycle: (task, its batch)
};
/// `proportional`: tasks in proportion to their training sets over `cycle_steps` steps (mix_opt
/// 0); else each task once in turn.
GlueCycle glue_cycle(const std::vector<GlueTask>& tasks, int64_t batch, int64_t max_length,
                     int64_t cycle_steps, bool proportional);

/// Forward multiply-adds of one training step, split by whether the backward goes through them
/// (each of those costs three forwards: input and weight gradients) or not.
struct BatchMacs {
  double trained = 0;       ///< on the loss's graph
  double forward_only = 0;  ///< computed, but not on the loss's graph
};
/// One mt-dnn step on a batch of `sequences` examples of `task` padded to `length`, whose first
/// segments pad to `first_length` (the SAN's hypothesis memory); `san_turns` for a SAN head.
/// docs/workloads/mt-dnn.md, "FLOPs".
BatchMacs mtdnn_batch_macs(const BertOptions& encoder, const GlueTask& task, int64_t san_turns,
                           int64_t sequences, int64_t length, int64_t first_length);

/// The shared encoder and one head per task.
class MtDnnImpl : public torch::nn::Module {
 public:
  MtDnnImpl(const BertOptions& encoder, const std::vector<GlueTask>& tasks, int64_t san_turns,
            double san_memory_dropout);

  /// Task `t`'s output: log-probabilities (SAN), logits (linear) or scores [B] (regression).
  torch::Tensor forward(int64_t t, const torch::Tensor& input_ids,
                        const torch::Tensor& token_type_ids, const torch::Tensor& attention_mask,
                        const torch::Tensor& premise_mask, const torch::Tensor& hypothesis_mask);

  std::vector<GlueTask> tasks;
  BertModel bert{nullptr};
  torch::nn::ModuleList heads{nullptr};
};
TORCH_MODULE(MtDnn);

/// A batch of one task as mt-dnn's batcher builds it, generated on the device: pairs padded to
/// the batch's longest, segment ids, the attention mask, and the masks the SAN reads (the
/// "hypothesis" is the first segment, the "premise" the second; true = not attended).
struct GlueBatch {
  /// `longest` > 0 puts one example of exactly that length in the batch (and caps the others
  /// at it): the batch then pads to `longest` whatever its size.
  GlueBatch(const GlueTask& task, int64_t task_index, int64_t batch, int64_t max_length,
            int64_t vocab, const torch::Device& device, uint64_t seed, int64_t longest = 0);

  int64_t task = 0;
  int64_t length = 0;  ///< padded length of this batch
  torch::Tensor input_ids, token_type_ids, attention_mask, premise_mask, hypothesis_mask, labels;
};

/// The registry entry: workload mt-dnn.
Architecture mtdnn_architecture();

}  // namespace gpubench::models
