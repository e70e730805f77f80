#include "models/bert_squad.h"

#include "gpubench/config/config.h"
#include "gpubench/train/model_reuse.h"
#include "gpubench/train/runtime.h"
#include "models/workload_common.h"

#include <torch/torch.h>

#include <cmath>

namespace gpubench::models {

namespace {

ParamSchema squad_schema() {
  return bert_encoder_schema().with({
      {"seq_length", ParamKind::kInt, 384, "max_seq_length: every feature is padded to it", {}, 16},
      {"max_query_length", ParamKind::kInt, 64, "questions are cut to this many WordPieces", {}, 1},
      {"question_tokens",
       ParamKind::kIntList,
       Json::array({6, 24}),
       "question length range [min, max] in WordPieces (guess; SQuAD questions average ~11 "
       "words)",
       {},
       1},
      {"context_tokens_mean",
       ParamKind::kNumber,
       160.0,
       "mean context-window length (guess; most SQuAD 1.1 paragraphs are shorter than the window, "
       "so most features are padded)",
       {},
       1},
      {"context_tokens_std", ParamKind::kNumber, 55.0, "spread of the context length", {}, 0},
      {"context_tokens_min", ParamKind::kInt, 25, "shortest context window", {}, 1},
      {"answer_tokens_max", ParamKind::kInt, 8, "answer spans are 1..this many WordPieces", {}, 1},
  });
}

SquadBatch::Lengths lengths_from(const Params& m) {
  SquadBatch::Lengths l;
  l.seq_length = m.i64("seq_length");
  const auto q = m.i64s("question_tokens");
  TORCH_CHECK(q.size() == 2 && q[0] <= q[1], "question_tokens must be [min, max]");
  l.question_min = std::min(q[0], m.i64("max_query_length"));
  l.question_max = std::min(q[1], m.i64("max_query_length"));
  l.context_mean = m.f64("context_tokens_mean");
  l.context_std = m.f64("context_tokens_std");
  l.context_min = m.i64("context_tokens_min");
  l.answer_max = m.i64("answer_tokens_max");
  TORCH_CHECK(3 + l.question_max + l.context_min <= l.seq_length,
              "seq_length too short for the question and the shortest context");
  return l;
}

}  // namespace

SquadBatch::SquadBatch(int64_t batch, const Lengths& l, int64_t vocab, const torch::Device& device,
                       uint64_t seed) {
  torch::manual_seed(seed + 11);
  const auto i64 = torch::TensorOptions().dtype(torch::kLong);
  const int64_t length = l.seq_length;
  auto question = torch::randint(l.question_min, l.question_max + 1, {batch, 1}, i64);
  // Context windows: a clipped normal; the window can fill what the question leaves.
  auto room = length - 3 - question;
  auto context =
      (torch::randn({batch, 1}) * l.context_std + l.context_mean).round().to(torch::kLong);
  context = torch::max(torch::min(context, room), torch::full_like(room, l.context_min));
  const auto first_sep = question + 1;  // [CLS] q... [SEP]
  const auto context_start = question + 2;
  const auto last_sep = context_start + context;  // the final [SEP]
  auto positions = torch::arange(length, i64).unsqueeze(0).expand({batch, length});
  const int64_t first_word = std::min(kFirstWordId, vocab / 2);
  auto ids = torch::randint(first_word, vocab, {batch, length}, i64);
  ids = ids.masked_fill(positions == 0, kCls)
            .masked_fill(positions == first_sep, kSep)
            .masked_fill(positions == last_sep, kSep)
            .masked_fill(positions > last_sep, 0);  // [PAD]
  auto real = positions <= last_sep;
  token_type_ids = ((positions >= context_start) & real).to(torch::kLong);
  // The answer: a span of 1..answer_max tokens inside the context window.
  auto span = torch::randint(1, l.answer_max + 1, {batch, 1}, i64);
  span = torch::min(span, context);
  auto offset =
      (torch::rand({batch, 1}) * (context - span + 1).to(torch::kFloat)).floor().to(torch::kLong);
  auto start = context_start + offset;
  start_positions = start.squeeze(1);
  end_positions = (start + span - 1).squeeze(1);
  real_tokens = real.sum().item<int64_t>();  // host-side data, built once, before any step
  input_ids = ids.to(device);
  token_type_ids = token_type_ids.to(device);
  attention_mask = real.to(device);
  start_positions = start_positions.to(device);
  end_positions = end_positions.to(device);
}

BertForQuestionAnsweringImpl::BertForQuestionAnsweringImpl(const BertOptions& options) {
  bert = register_module("bert", BertModel(options));
  qa_outputs = register_module("qa_outputs", Linear(options.hidden_size(), 2));
  init_bert_weights(*this, options.init_range());
}

std::pair<torch::Tensor, torch::Tensor> BertForQuestionAnsweringImpl::forward(
    const SquadBatch& batch) {
  auto sequence = bert->forward(batch.input_ids, batch.token_type_ids, batch.attention_mask).first;
  auto logits = qa_outputs(sequence);  // [B, L, 2]
  return {logits.select(-1, 0), logits.select(-1, 1)};
}

namespace {

class BertSquadStep final : public train::RuntimeStep {
 public:
  explicit BertSquadStep(const StepContext& ctx)
      : RuntimeStep(ctx),
        model_(build(ctx)),
        batch_(ctx.batch, lengths_from(ctx.model), ctx.model.i64("vocab_size"), ctx.device,
               ctx.seed),
        updater_(runtime_.add(
            "model", make_bert_updater(*model_, ctx.optimizer, ctx.precision, ctx.device))) {}

  double run() override {
    ran_ = true;
    return runtime_.run([&] {
      updater_.zero_grad();
      torch::Tensor loss;
      {
        const auto autocast = runtime_.autocast();
        auto [start, end] = model_->forward(batch_);
        // run_squad.py: the mean of the start and end cross-entropies over all positions.
        loss =
            (torch::nn::functional::cross_entropy(start.to(torch::kFloat), batch_.start_positions) +
             torch::nn::functional::cross_entropy(end.to(torch::kFloat), batch_.end_positions)) /
            2;
      }
      runtime_.record_loss("loss", loss);
      runtime_.backward(updater_, loss);
      runtime_.update(updater_);
      return static_cast<double>(batch_.input_ids.size(0));
    });
  }

  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"model", model_->parameters()}};
  }

  // docs/workloads/bert-finetune.md, "FLOPs": the encoder on every position of the padded
  // window (padding is computed) and the span head, three forwards each (input and weight
  // gradients); a pooler, where a config builds one, runs outside the loss's graph.
  std::optional<double> step_flops() const override {
    if (!ran_) return std::nullopt;  // the FLOPs of the last run(), as every step reports them
    const BertOptions& o = model_->bert->options;
    const int64_t sequences = batch_.input_ids.size(0), length = batch_.input_ids.size(1);
    const auto h = static_cast<double>(o.hidden_size());
    const double trained = bert_encoder_macs(o, sequences, length) +
                           static_cast<double>(sequences * length) * h * 2;
    const double forward_only = o.pooler() ? static_cast<double>(sequences) * h * h : 0.0;
    return 2 * (3 * trained + forward_only);
  }

  Json batch_info() const override {
    const int64_t total = batch_.input_ids.numel();
    return Json{
        {"sequences", batch_.input_ids.size(0)},
        {"seq_length", batch_.input_ids.size(1)},
        {"padding_fraction",
         total ? 1.0 - static_cast<double>(batch_.real_tokens) / static_cast<double>(total) : 0.0}};
  }

 private:
  static BertForQuestionAnswering build(const StepContext& ctx) {
    auto model = train::build_model<BertForQuestionAnswering>(
        train::reuse_key("bert-squad", ctx.model.json().dump(), ctx.seed), ctx.device, ctx.seed,
        [&] { return BertForQuestionAnswering(bert_options(ctx.model)); });
    // The encoder's layers (models/fast_paths.h); the span head has two outputs, no vocabulary.
    set_fast_paths(*model, ctx.runtime.fast_paths, fusions(ctx.runtime));
    return model;
  }

  BertForQuestionAnswering model_;
  SquadBatch batch_;
  bool ran_ = false;  // run() was called: step_flops() has a last run to describe
  train::Updater& updater_;
};

}  // namespace

Architecture bert_squad_architecture() {
  return make_architecture<BertSquadStep>(
      "bert-squad", "BERT fine-tuning on SQuAD 1.1: span head, (start CE + end CE) / 2",
      squad_schema(), bert_optimizer_schema(), [](const Params& model) {
        return total_parameters(BertForQuestionAnswering(bert_options(model)));
      });
}

}  // namespace gpubench::models
