#include "models/bert.h"

#include "gpubench/base/compat.h"
#include "gpubench/config/config.h"
#include "gpubench/train/losses.h"
#include "gpubench/train/model_reuse.h"
#include "gpubench/train/residual_norm.h"
#include "gpubench/train/runtime.h"
#include "models/attention.h"
#include "models/workload_common.h"

#include <torch/torch.h>

#include <cmath>

namespace gpubench::models {

// ---- Config schema ----

ParamSchema bert_encoder_schema() {
  return {
      {"vocab_size", ParamKind::kInt, 30522, "WordPiece vocabulary (uncased BERT: 30522)", {}, 1},
      {"hidden_size", ParamKind::kInt, 768, "hidden width", {}, 1},
      {"layers", ParamKind::kInt, 12, "transformer layers", {}, 1},
      {"heads", ParamKind::kInt, 12, "attention heads (divides hidden_size)", {}, 1},
      {"intermediate_size", ParamKind::kInt, 3072, "feed-forward width", {}, 1},
      {"max_positions", ParamKind::kInt, 512, "learned positions", {}, 1},
      {"type_vocab_size", ParamKind::kInt, 2, "segment ids", {}, 1},
      {"hidden_dropout", ParamKind::kNumber, 0.1, "dropout probability", {}, 0},
      {"attention_dropout", ParamKind::kNumber, 0.1, "dropout on attention probabilities", {}, 0},
      {"layer_norm_eps", ParamKind::kNumber, 1e-12, "LayerNorm epsilon", {}, 0},
      {"gelu",
       ParamKind::kString,
       "tanh",
       "GELU form: tanh (TF original) or erf (PyTorch ports)",
       {"tanh", "erf"}},
      {"pooler", ParamKind::kBool, true, "build the pooler (dense + tanh on [CLS])"},
      {"init_range", ParamKind::kNumber, 0.02, "std of the truncated-normal initializer", {}, 0},
      attention_param(),
  };
}

BertOptions bert_options(const Params& m) {
  return BertOptions(m.i64("vocab_size"))
      .hidden_size(m.i64("hidden_size"))
      .layers(m.i64("layers"))
      .heads(m.i64("heads"))
      .intermediate_size(m.i64("intermediate_size"))
      .max_positions(m.i64("max_positions"))
      .type_vocab_size(m.i64("type_vocab_size"))
      .hidden_dropout(m.f64("hidden_dropout"))
      .attention_dropout(m.f64("attention_dropout"))
      .layer_norm_eps(m.f64("layer_norm_eps"))
      .gelu(m.str("gelu"))
      .pooler(m.flag("pooler"))
      .init_range(m.f64("init_range"))
      .attention(m.str("attention"));
}

ParamSchema bert_optimizer_schema() {
  return {
      {"name",
       ParamKind::kString,
       "bert-adam",
       "bert-adam (AdamWeightDecay, no bias correction) or adamw (torch AdamW)",
       {"bert-adam", "adamw"}},
      {"lr", ParamKind::kNumber, 1e-4, "peak learning rate", {}, 0},
      {"beta1", ParamKind::kNumber, 0.9, "first-moment decay", {}, 0},
      {"beta2", ParamKind::kNumber, 0.999, "second-moment decay", {}, 0},
      {"eps", ParamKind::kNumber, 1e-6, "added to the denominator", {}, 0},
      {"weight_decay",
       ParamKind::kNumber,
       0.01,
       "decoupled decay, not on LayerNorm or bias",
       {},
       0},
      {"clip_norm", ParamKind::kNumber, 1.0, "global gradient-norm clip; 0 = off", {}, 0},
      {"warmup_steps", ParamKind::kInt, 10000, "linear warm-up steps", {}, 0},
      {"total_steps", ParamKind::kInt, 1000000, "steps of the linear decay to 0", {}, 1},
  };
}

train::Updater make_bert_updater(const torch::nn::Module& module, const Params& o,
                                 Precision precision, const torch::Device& device) {
  auto adam = train::adam_options(o, train::WeightDecayMode::kDecoupled);
  adam.bias_correction = o.str("name") == "adamw";
  // google-research/bert excludes variables named LayerNorm or bias from decay; our names for
  // those contain "norm" and "bias".
  auto groups = train::decay_groups(module, o.f64("weight_decay"), {"norm", "bias"});
  return train::Updater(
      std::make_unique<train::Adam>(std::move(groups), adam), precision, device, o.f64("clip_norm"),
      train::warmup_linear_decay(adam.lr, o.i64("warmup_steps"), o.i64("total_steps")));
}

// ---- Modules ----

torch::Tensor bert_gelu(const torch::Tensor& x, const std::string& form) {
  return torch::gelu(x, form == "tanh" ? "tanh" : "none");
}

BertEmbeddingsImpl::BertEmbeddingsImpl(const BertOptions& o) {
  word = register_module("word", torch::nn::Embedding(o.vocab_size(), o.hidden_size()));
  position = register_module("position", torch::nn::Embedding(o.max_positions(), o.hidden_size()));
  token_type =
      register_module("token_type", torch::nn::Embedding(o.type_vocab_size(), o.hidden_size()));
  norm = register_module(
      "norm",
      torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.hidden_size()}).eps(o.layer_norm_eps())));
  dropout = register_module("dropout", torch::nn::Dropout(o.hidden_dropout()));
}

torch::Tensor BertEmbeddingsImpl::forward(const torch::Tensor& input_ids,
                                          const torch::Tensor& token_type_ids) {
  const int64_t length = input_ids.size(1);
  auto positions = torch::arange(length, input_ids.options());
  auto x = word(input_ids) + position(positions).unsqueeze(0) + token_type(token_type_ids);
  return dropout(norm(x));
}

BertLayerImpl::BertLayerImpl(const BertOptions& o) : options(o) {
  TORCH_CHECK(o.hidden_size() % o.heads() == 0, "hidden_size must be a multiple of heads");
  const int64_t h = o.hidden_size();
  // One projection for query, key and value: the same parameters as three h x h layers.
  qkv = register_module("qkv", Linear(h, 3 * h));
  attention_out = register_module("attention_out", Linear(h, h));
  attention_norm = register_module(
      "attention_norm",
      torch::nn::LayerNorm(torch::nn::LayerNormOptions({h}).eps(o.layer_norm_eps())));
  intermediate = register_module("intermediate", Linear(h, o.intermediate_size()));
  output = register_module("output", Linear(o.intermediate_size(), h));
  output_norm = register_module(
      "output_norm",
      torch::nn::LayerNorm(torch::nn::LayerNormOptions({h}).eps(o.layer_norm_eps())));
}

torch::Tensor BertLayerImpl::forward(const torch::Tensor& x,
                                     const std::optional<torch::Tensor>& mask) {
  const int64_t batch = x.size(0), length = x.size(1), heads = options.heads();
  const int64_t head_dim = options.hidden_size() / heads;
  // [B, L, 3H] -> 3 x [B, heads, L, head_dim]. unbind, not three selects: its backward stacks
  // the three gradients in one kernel, where each select's writes its gradient into a zeroed
  // copy of the whole projection, and the three are summed.
  // The fast path's split_heads: the same views, with one write of the three gradients.
  const auto qkv_heads =
      fast_paths
          ? split_heads(qkv(x), 3, heads)
          : qkv(x).view({batch, length, 3, heads, head_dim}).permute({2, 0, 3, 1, 4}).unbind(0);
  auto context = models::attention(options.attention(), qkv_heads[0], qkv_heads[1], qkv_heads[2],
                                   mask, is_training() ? options.attention_dropout() : 0.0,
                                   /*is_causal=*/false, fast_paths, nullptr, fused.softmax);
  // A view where the attention kernel wrote [B, L, heads, head_dim] (the fused kernels), a copy
  // after the stored path's batched product.
  context = context.transpose(1, 2).reshape({batch, length, options.hidden_size()});
  // residual + dropout, then LayerNorm: ATen's ops, or one fused function (runtime.fused_norm).
  const auto end = [&](const torch::Tensor& sub, const torch::Tensor& residual,
                       torch::nn::LayerNorm& norm) {
    return train::residual_layer_norm(sub, residual, options.hidden_dropout(), is_training(),
                                      {norm->weight, norm->bias, options.layer_norm_eps()},
                                      fused.norm);
  };
  auto h = end(attention_out(context), x, attention_norm);
  return end(output(bert_gelu(intermediate(h), options.gelu())), h, output_norm);
}

double bert_encoder_macs(const BertOptions& o, int64_t sequences, int64_t length) {
  return static_cast<double>(sequences) * static_cast<double>(o.layers()) *
         encoder_layer_macs(static_cast<double>(length), static_cast<double>(o.hidden_size()),
                            static_cast<double>(o.intermediate_size()));
}

BertModelImpl::BertModelImpl(const BertOptions& o) : options(o) {
  embeddings = register_module("embeddings", BertEmbeddings(o));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.layers(); ++i) layers->push_back(BertLayer(o));
  if (o.pooler()) {
    pooler = register_module("pooler", Linear(o.hidden_size(), o.hidden_size()));
  }
}

std::pair<torch::Tensor, torch::Tensor> BertModelImpl::forward(
    const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
    const std::optional<torch::Tensor>& attention_mask) {
  std::optional<torch::Tensor> additive;
  if (attention_mask) {
    // [B, L] bool -> [B, 1, 1, L]: 0 where attended, a large negative where padded.
    auto keep = attention_mask->view({input_ids.size(0), 1, 1, input_ids.size(1)});
    additive = torch::zeros(keep.sizes(), torch::TensorOptions().device(input_ids.device()))
                   .masked_fill(keep.logical_not(), -10000.0);
  }
  auto x = embeddings->forward(input_ids, token_type_ids);
  if (additive) *additive = additive->to(x.dtype());
  for (const auto& layer : *layers) x = layer->as<BertLayer>()->forward(x, additive);
  torch::Tensor pooled;
  if (pooler) pooled = torch::tanh(pooler(x.select(1, 0)));
  return {x, pooled};
}

void init_bert_weights(torch::nn::Module& module, double init_range) {
  torch::NoGradGuard no_grad;
  auto truncated_normal = [&](torch::Tensor w) {
    w.normal_(0, init_range).clamp_(-2 * init_range, 2 * init_range);
  };
  for (auto& m : module.modules(/*include_self=*/false)) {
    if (auto* linear = m->as<torch::nn::Linear>()) {
      truncated_normal(linear->weight);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* embedding = m->as<torch::nn::Embedding>()) {
      truncated_normal(embedding->weight);
    } else if (auto* norm = m->as<torch::nn::LayerNorm>()) {
      norm->weight.fill_(1);
      norm->bias.zero_();
    }
  }
}

BertForPretrainingImpl::BertForPretrainingImpl(const BertOptions& o, bool with_next_sentence) {
  bert = register_module("bert", BertModel(o));
  transform = register_module("transform", Linear(o.hidden_size(), o.hidden_size()));
  transform_norm = register_module(
      "transform_norm",
      torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.hidden_size()}).eps(o.layer_norm_eps())));
  output_bias = register_parameter("output_bias", torch::zeros({o.vocab_size()}));
  if (with_next_sentence) {
    TORCH_CHECK(o.pooler(), "next-sentence prediction needs the pooler");
    next_sentence = register_module("next_sentence", Linear(o.hidden_size(), 2));
  }
  init_bert_weights(*this, o.init_range());
}

torch::Tensor BertForPretrainingImpl::lm_logits(const torch::Tensor& hidden) {
  auto h = transform_norm(bert_gelu(transform(hidden), bert->options.gelu()));
  if (fast_paths) return aligned_vocab_linear(h, bert->word_embeddings(), output_bias);
  return torch::linear(h, bert->word_embeddings(), output_bias);
}

void BertForPretrainingImpl::pad_vocab_projection() {
  models::pad_vocab_projection(bert->word_embeddings(), output_bias);
}

// ---- The training step ----

namespace {

ParamSchema pretraining_schema() {
  return bert_encoder_schema().with({
      {"seq_length", ParamKind::kInt, 128, "tokens per sequence", {}, 8},
      {"masked_per_sequence",
       ParamKind::kInt,
       20,
       "masked-LM predictions per sequence (max_predictions_per_seq)",
       {},
       1},
      {"next_sentence", ParamKind::kBool, true, "next-sentence prediction loss"},
      {"lm_logits",
       ParamKind::kString,
       "masked",
       "masked: logits at the masked positions only (google-research/bert); all: at every "
       "position (Hugging Face)",
       {"masked", "all"}},
  });
}

}  // namespace

PretrainingBatch::PretrainingBatch(int64_t batch, int64_t length, int64_t masked, int64_t vocab,
                                   const torch::Device& device, uint64_t seed) {
  auto gen_options = torch::TensorOptions().dtype(torch::kLong);
  torch::manual_seed(seed + 1);
  auto positions = torch::arange(length, gen_options).unsqueeze(0).expand({batch, length});
  // Sentence A takes between 8 and length - 11 tokens; B fills the rest.
  auto a_length = torch::randint(8, length - 10, {batch, 1}, gen_options);
  // Word ids above the special tokens ([PAD], [unused*], [UNK], [CLS], [SEP], [MASK]); a
  // reduced smoke-test vocabulary keeps the upper half.
  const int64_t first_word = std::min(kFirstWordId, vocab / 2);
  TORCH_CHECK(vocab > 2 * 103, "vocab_size must exceed 206 (special token ids)");
  auto ids = torch::randint(first_word, vocab, {batch, length}, gen_options);
  auto first_sep = a_length + 1;
  ids = ids.masked_fill(positions == 0, kCls)
            .masked_fill(positions == first_sep, kSep)
            .masked_fill(positions == length - 1, kSep);
  token_type_ids = (positions > first_sep).to(torch::kLong);
  // Distinct masked positions among the word tokens: the `masked` smallest random keys.
  auto keys = torch::rand({batch, length});
  auto special = (positions == 0) | (positions == first_sep) | (positions == length - 1);
  keys = keys.masked_fill(special, 2.0);
  masked_positions = std::get<0>(std::get<1>(keys.topk(masked, 1, /*largest=*/false)).sort(1));
  masked_ids = ids.gather(1, masked_positions);
  // As create_pretraining_data.py: 80% of the masked inputs become [MASK], 10% a random
  // word, 10% stay.
  constexpr int64_t kMask = 103;
  auto choice = torch::rand(masked_ids.sizes());
  auto random_words = torch::randint(first_word, vocab, masked_ids.sizes(), gen_options);
  auto replacement = torch::where(choice < 0.8, torch::full_like(masked_ids, kMask),
                                  torch::where(choice < 0.9, random_words, masked_ids));
  input_ids = ids.scatter(1, masked_positions, replacement);
  next_sentence = torch::randint(0, 2, {batch}, gen_options);
  lm_labels =
      torch::full({batch, length}, -100, gen_options).scatter(1, masked_positions, masked_ids);
  input_ids = input_ids.to(device);
  token_type_ids = token_type_ids.to(device);
  masked_positions = masked_positions.to(device);
  masked_ids = masked_ids.to(device);
  next_sentence = next_sentence.to(device);
  lm_labels = lm_labels.to(device);
}

torch::Tensor masked_lm_loss(BertForPretrainingImpl& model, const torch::Tensor& sequence,
                             const PretrainingBatch& batch, bool all_positions, bool fused) {
  const int64_t vocab = model.bert->word_embeddings().size(0);
  if (all_positions) {
    auto logits = model.lm_logits(sequence);
    if (fused && train::fused_vocab_loss_runs(logits)) {
      // The mean over the labelled positions, as nll_loss's: the count from the labels.
      const auto labels = batch.lm_labels.view(-1);
      const auto sums =
          train::fused_vocab_loss_sums(logits.view({-1, logits.size(-1)}), labels, vocab, -100);
      return sums[0] / labels.ne(-100).sum().to(torch::kFloat);
    }
    if (model.fast_paths) {
      // cross_entropy is log_softmax then nll_loss; the padded logits' -inf columns get
      // probability 0 and no label.
      return torch::nll_loss(
          torch::log_softmax(logits.view({-1, logits.size(-1)}), -1, torch::kFloat),
          batch.lm_labels.view(-1), /*weight=*/{}, at::Reduction::Mean,
          /*ignore_index=*/-100);
    }
    return torch::nn::functional::cross_entropy(
        logits.view({-1, logits.size(-1)}).to(torch::kFloat), batch.lm_labels.view(-1),
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
  }
  const int64_t h = sequence.size(-1);
  auto index = batch.masked_positions.unsqueeze(-1).expand({-1, -1, h});
  auto logits = model.lm_logits(sequence.gather(1, index));
  if (fused && train::fused_vocab_loss_runs(logits)) {
    const auto ids = batch.masked_ids.reshape({-1});
    // Every masked position has a word: no target is ignored (-1 is never one).
    const auto sums = train::fused_vocab_loss_sums(logits.reshape({-1, logits.size(-1)}), ids,
                                                   vocab, /*ignore_index=*/-1);
    return sums[0] / (static_cast<double>(ids.numel()) + 1e-5);
  }
  auto log_probs = model.fast_paths ? torch::log_softmax(logits, -1, torch::kFloat)
                                    : torch::log_softmax(logits.to(torch::kFloat), -1);
  auto nll = -log_probs.gather(-1, batch.masked_ids.unsqueeze(-1)).squeeze(-1);
  return nll.sum() / (static_cast<double>(nll.numel()) + 1e-5);
}

namespace {

class BertPretrainingStep final : public train::RuntimeStep {
 public:
  explicit BertPretrainingStep(const StepContext& ctx)
      : RuntimeStep(ctx),
        all_logits_(ctx.model.str("lm_logits") == "all"),
        fused_loss_(ctx.runtime.fused_loss),
        model_(build(ctx)),
        batch_(ctx.batch, ctx.model.i64("seq_length"), ctx.model.i64("masked_per_sequence"),
               ctx.model.i64("vocab_size"), ctx.device, ctx.seed),
        updater_(runtime_.add(
            "model", make_bert_updater(*model_, ctx.optimizer, ctx.precision, ctx.device))) {}

  double run() override {
    ran_ = true;
    return runtime_.run([&] {
      updater_.zero_grad();
      torch::Tensor loss, mlm, nsp;
      {
        const auto autocast = runtime_.autocast();
        auto [sequence, pooled] = model_->bert->forward(batch_.input_ids, batch_.token_type_ids);
        mlm = masked_lm_loss(*model_, sequence, batch_, all_logits_, fused_loss_);
        loss = mlm;
        if (model_->next_sentence) {
          nsp = torch::nn::functional::cross_entropy(
              model_->next_sentence(pooled).to(torch::kFloat), batch_.next_sentence);
          loss = loss + nsp;
        }
      }
      runtime_.record_loss("loss", loss);
      runtime_.record_loss("mlm", mlm);
      if (nsp.defined()) runtime_.record_loss("nsp", nsp);
      runtime_.backward(updater_, loss);
      runtime_.update(updater_);
      return static_cast<double>(batch_.input_ids.size(0));
    });
  }

  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"model", model_->parameters()}};
  }

  // docs/workloads/bert-base.md, "FLOPs": the encoder, the masked-LM head (transform and the
  // tied output layer) at the positions it reads, next sentence on the pooled output; the
  // backward computes every one's input and weight gradients (the embeddings' output needs
  // one), so each costs three forwards. A pooler without next sentence runs outside the loss's
  // graph: forward only.
  std::optional<double> step_flops() const override {
    if (!ran_) return std::nullopt;  // the FLOPs of the last run(), as every step reports them
    const BertOptions& o = model_->bert->options;
    const int64_t sequences = batch_.input_ids.size(0), length = batch_.input_ids.size(1);
    const auto h = static_cast<double>(o.hidden_size());
    const double positions = all_logits_ ? static_cast<double>(sequences * length)
                                         : static_cast<double>(batch_.masked_positions.numel());
    double trained = bert_encoder_macs(o, sequences, length) +
                     positions * (h * h + h * static_cast<double>(o.vocab_size()));
    double forward_only = 0;
    if (model_->next_sentence) {
      trained += static_cast<double>(sequences) * (h * h + 2 * h);
    } else if (o.pooler()) {
      forward_only += static_cast<double>(sequences) * h * h;
    }
    return 2 * (3 * trained + forward_only);
  }

  Json batch_info() const override {
    return Json{{"sequences", batch_.input_ids.size(0)},
                {"seq_length", batch_.input_ids.size(1)},
                {"masked_per_sequence", batch_.masked_positions.size(1)}};
  }

 private:
  /// The model on the device (before the optimizer sees its parameters), in training mode.
  static BertForPretraining build(const StepContext& ctx) {
    auto model = train::build_model<BertForPretraining>(
        train::reuse_key("bert-pretraining", ctx.model.json().dump(), ctx.seed), ctx.device,
        ctx.seed, [&] {
          return BertForPretraining(bert_options(ctx.model), ctx.model.flag("next_sentence"));
        });
    set_fast_paths(*model, ctx.runtime.fast_paths, fusions(ctx.runtime));
    if (ctx.runtime.fast_paths) model->pad_vocab_projection();
    return model;
  }

  bool all_logits_;
  bool fused_loss_;  // runtime.fused_loss
  BertForPretraining model_;
  PretrainingBatch batch_;
  bool ran_ = false;  // run() was called: step_flops() has a last run to describe
  train::Updater& updater_;
};

}  // namespace

Architecture bert_pretraining_architecture() {
  return make_architecture<BertPretrainingStep>(
      "bert-pretraining",
      "BERT pretraining: masked LM (+ next sentence), google-research/bert or HF layout",
      pretraining_schema(), bert_optimizer_schema(), [](const Params& model) {
        return total_parameters(
            BertForPretraining(bert_options(model), model.flag("next_sentence")));
      });
}

}  // namespace gpubench::models
