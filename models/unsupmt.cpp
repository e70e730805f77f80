#include "models/unsupmt.h"

#include "gpubench/base/compat.h"
#include "gpubench/config/config.h"
#include "gpubench/train/losses.h"
#include "gpubench/train/model_reuse.h"
#include "models/attention.h"
#include "models/workload_common.h"
#include "models/xlm_batching.h"

#include <torch/torch.h>

#include <limits>
#include <tuple>

namespace gpubench::models {

// ---- Noise ----

torch::Tensor word_shuffle(const torch::Tensor& x, const torch::Tensor& lengths,
                           const torch::Tensor& noise) {
  const int64_t rows = x.size(0) - 1;  // rows that may move: all but the last
  auto position = torch::arange(rows, torch::TensorOptions().dtype(torch::kDouble)).unsqueeze(1);
  auto scores = position + noise.to(torch::kDouble);
  scores[0].fill_(-1.0);  // the start symbol stays first
  // Rows at or after the final </s> keep their place: they sort last, in order (stable sort).
  const auto moving = position < (lengths - 1).unsqueeze(0).to(torch::kDouble);
  scores = scores.masked_fill(moving.logical_not(), std::numeric_limits<double>::infinity());
  const auto permutation =
      std::get<1>(scores.sort(/*stable=*/c10::optional<bool>(true), /*dim=*/0));
  auto shuffled = x.clone();
  shuffled.narrow(0, 0, rows).copy_(x.narrow(0, 0, rows).gather(0, permutation));
  return shuffled;
}

std::pair<torch::Tensor, torch::Tensor> word_dropout(const torch::Tensor& x,
                                                     const torch::Tensor& lengths,
                                                     const torch::Tensor& keep,
                                                     const torch::Tensor& fallback) {
  const int64_t rows = x.size(0) - 1, batch = x.size(1);
  auto position = torch::arange(rows, lengths.options()).unsqueeze(1);
  // Rows 0 .. len - 2: the start symbol (always kept) and the words.
  auto kept = keep.to(torch::kBool) & (position < (lengths - 1).unsqueeze(0));
  kept[0].fill_(true);
  // A sentence left with the start symbol alone keeps one random word (XLM appends it; keeping
  // it in place is the same sentence, since it follows the start symbol either way).
  const auto alone = kept.sum(0) == 1;
  kept = kept | (alone.unsqueeze(0) & (position == fallback.unsqueeze(0)));
  const auto new_lengths = kept.sum(0) + 1;  // + the final </s>
  const int64_t new_rows = new_lengths.max().item<int64_t>();
  // Each kept token goes to row (kept tokens before it); dropped ones to a scratch row past
  // the end, cut off afterwards.
  auto out = torch::full({new_rows + 1, batch}, xlm::kPadIndex, x.options());
  const auto target_row =
      torch::where(kept, kept.cumsum(0) - 1, torch::full_like(kept, new_rows, lengths.options()));
  out.scatter_(0, target_row, x.narrow(0, 0, rows));
  out = out.narrow(0, 0, new_rows).clone();
  out.scatter_(0, (new_lengths - 1).unsqueeze(0),
               torch::full({1, batch}, xlm::kEosIndex, x.options()));
  return {out, new_lengths};
}

torch::Tensor word_blank(const torch::Tensor& x, const torch::Tensor& lengths,
                         const torch::Tensor& keep) {
  const int64_t rows = x.size(0) - 1;
  auto position = torch::arange(rows, lengths.options()).unsqueeze(1);
  auto blank = keep.to(torch::kBool).logical_not() & (position < (lengths - 1).unsqueeze(0));
  blank[0].fill_(false);
  auto out = x.clone();
  out.narrow(0, 0, rows).masked_fill_(blank, xlm::kMaskIndex);
  return out;
}

std::pair<torch::Tensor, torch::Tensor> add_noise(const torch::Tensor& x,
                                                  const torch::Tensor& lengths,
                                                  const NoiseOptions& options) {
  torch::Tensor words = x, sizes = lengths;
  if (options.shuffle > 0) {
    words = word_shuffle(words, sizes,
                         torch::rand({words.size(0) - 1, words.size(1)},
                                     torch::TensorOptions().dtype(torch::kDouble)) *
                             options.shuffle);
  }
  if (options.dropout > 0) {
    const auto keep = torch::rand({words.size(0) - 1, words.size(1)}) >= options.dropout;
    // XLM's fallback: np.random.randint(1, len(words)), words being the len - 1 leading rows.
    const auto fallback =
        (torch::rand({words.size(1)}, torch::TensorOptions().dtype(torch::kDouble)) *
         (sizes - 2).to(torch::kDouble))
            .floor()
            .to(torch::kLong) +
        1;
    std::tie(words, sizes) = word_dropout(words, sizes, keep, fallback);
  }
  if (options.blank > 0) {
    words =
        word_blank(words, sizes, torch::rand({words.size(0) - 1, words.size(1)}) >= options.blank);
  }
  return {words, sizes};
}

// ---- The workload ----

namespace {

/// XLM's README pair: --lgs en-fr, so en is language 0 and fr language 1.
const std::vector<std::string> kLanguages = {"en", "fr"};

/// Greedy decoding length of a back-translation (XLM's bt_step): int(1.3 * max(len1) + 5).
int64_t decode_length(int64_t longest) {
  return static_cast<int64_t>(1.3 * static_cast<double>(longest) + 5);
}

/// Which of the (sorted, length-homogeneous) token batches each sub-step trains on: one batch
/// per octile-pair, so both auto-encoding steps together and both back-translation steps
/// together sample a short and a long batch (the 12.5/87.5% and the 37.5/62.5% points).
/// Order: AE en, AE fr, BT en-fr-en, BT fr-en-fr.
const std::vector<double> kBatchQuantiles = {0.125, 0.875, 0.375, 0.625};

uint64_t language_seed(uint64_t seed, int64_t lang) {
  return seed ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(lang + 1));
}

XlmTargets make_targets(const xlm::SentenceBatch& batch, const torch::Device& device) {
  XlmTargets t;
  t.host_lengths = batch.host_lengths;
  const int64_t slen = batch.x.size(0), n = batch.x.size(1);
  std::vector<int64_t> predicted, labels;
  const auto x = batch.x.accessor<int64_t, 2>();
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t p = 0; p + 1 < t.host_lengths[b]; ++p) {
      predicted.push_back(b * slen + p);
      labels.push_back(x[p + 1][b]);
    }
  }
  t.words = static_cast<int64_t>(predicted.size());
  const auto long_options = torch::TensorOptions().dtype(torch::kLong);
  t.x = batch.x.to(device);
  t.lengths = batch.lengths.to(device);
  t.predicted = torch::tensor(predicted, long_options).to(device);
  t.labels = torch::tensor(labels, long_options).to(device);
  return t;
}

}  // namespace

ParamSchema unsupmt_model_schema() {
  return {
      {"vocab_size", ParamKind::kInt, 64699, "shared BPE vocabulary (XLM en-de: 64,699)", {}, 15},
      {"dim", ParamKind::kInt, 1024, "embedding and hidden width (--emb_dim)", {}, 1},
      {"layers", ParamKind::kInt, 6, "layers of the encoder and of the decoder", {}, 1},
      {"heads", ParamKind::kInt, 8, "attention heads (divides dim)", {}, 1},
      {"ffn_dim", ParamKind::kInt, 4096, "feed-forward width (XLM: 4 x dim)", {}, 1},
      {"max_positions", ParamKind::kInt, 512, "learned positions (N_MAX_POSITIONS)", {}, 2},
      {"n_langs", ParamKind::kInt, 2, "languages with a learned embedding", {}, 2},
      {"dropout", ParamKind::kNumber, 0.1, "dropout probability", {}, 0},
      {"attention_dropout", ParamKind::kNumber, 0.1, "dropout on attention probabilities", {}, 0},
      {"layer_norm_eps", ParamKind::kNumber, 1e-12, "LayerNorm epsilon", {}, 0},
      attention_param(),
      {"word_shuffle", ParamKind::kNumber, 3.0, "AE noise: shuffle distance k (0 = off)", {}, 0},
      {"word_dropout", ParamKind::kNumber, 0.1, "AE noise: word drop probability", {}, 0},
      {"word_blank", ParamKind::kNumber, 0.1, "AE noise: word blank probability", {}, 0},
      {"lambda_ae", ParamKind::kNumber, 1.0, "AE loss weight (--lambda_ae at step 0)", {}, 0},
      {"max_len", ParamKind::kInt, 100, "longest sentence kept, in words (--max_len)", {}, 1},
      {"length_mean", ParamKind::kNumber, 27.0, "mean words per sentence (log-normal)", {}, 1},
      {"length_log_sigma", ParamKind::kNumber, 0.55, "std of log(words per sentence)", {}, 0},
      {"corpus_sentences",
       ParamKind::kInt,
       5000000,
       "synthetic sentences per language the batches are cut from (get-data-nmt.sh: 5M)",
       {},
       1},
  };
}

ParamSchema unsupmt_optimizer_schema() {
  return {
      {"lr", ParamKind::kNumber, 1e-4, "rate at the end of the warm-up", {}, 0},
      {"beta1", ParamKind::kNumber, 0.9, "first-moment decay", {}, 0},
      {"beta2", ParamKind::kNumber, 0.98, "second-moment decay", {}, 0},
      {"eps", ParamKind::kNumber, 1e-8, "added to the denominator", {}, 0},
      {"warmup_steps", ParamKind::kInt, 4000, "updates of the linear warm-up", {}, 0},
      {"warmup_init_lr", ParamKind::kNumber, 1e-7, "rate of the first update", {}, 0},
      {"clip_norm", ParamKind::kNumber, 5.0, "global gradient-norm clip; 0 = off", {}, 0},
  };
}

double xlm_encoder_macs(const XlmTransformerOptions& o, int64_t sentences, int64_t rows) {
  return static_cast<double>(sentences) * static_cast<double>(o.layers()) *
         encoder_layer_macs(static_cast<double>(rows), static_cast<double>(o.dim()),
                            static_cast<double>(o.ffn_dim()));
}

double xlm_decoder_macs(const XlmTransformerOptions& o, int64_t sentences, int64_t rows,
                        int64_t source_rows, int64_t predicted) {
  const auto d = static_cast<double>(o.dim());
  const auto f = static_cast<double>(o.ffn_dim());
  const auto s = static_cast<double>(rows);
  const auto src = static_cast<double>(source_rows);
  const double per_layer =
      s * (6 * d * d + 2 * d * f) + 2 * s * s * d + 2 * s * src * d + src * 2 * d * d;
  return static_cast<double>(sentences) * static_cast<double>(o.layers()) * per_layer +
         static_cast<double>(predicted) * d * static_cast<double>(o.n_words());
}

double xlm_generation_macs(const XlmTransformerOptions& o, int64_t sentences,
                           int64_t source_rows, int64_t max_len) {
  const auto d = static_cast<double>(o.dim());
  const auto f = static_cast<double>(o.ffn_dim());
  const auto layers = static_cast<double>(o.layers());
  const auto src = static_cast<double>(source_rows);
  double per_sentence = layers * src * 2 * d * d;  // the source's keys and values, once
  for (int64_t t = 0; t + 1 < max_len; ++t) {
    per_sentence += layers * (6 * d * d + 2 * d * f + 2 * static_cast<double>(t + 1) * d +
                              2 * src * d) +
                    d * static_cast<double>(o.n_words());
  }
  return static_cast<double>(sentences) * per_sentence;
}

XlmTransformerOptions xlm_options(const Params& m, bool is_decoder) {
  return XlmTransformerOptions(m.i64("vocab_size"), is_decoder)
      .dim(m.i64("dim"))
      .layers(m.i64("layers"))
      .heads(m.i64("heads"))
      .ffn_dim(m.i64("ffn_dim"))
      .max_positions(m.i64("max_positions"))
      .n_langs(m.i64("n_langs"))
      .dropout(m.f64("dropout"))
      .attention_dropout(m.f64("attention_dropout"))
      .layer_norm_eps(m.f64("layer_norm_eps"))
      .attention(m.str("attention"));
}

UnsupMtStep::UnsupMtStep(const StepContext& ctx)
    : RuntimeStep(ctx),
      lambda_ae_(ctx.model.f64("lambda_ae")),
      tokens_per_batch_(ctx.batch),
      fused_loss_(ctx.runtime.fused_loss) {
  const Params& m = ctx.model;
  // The decoder is built from where the encoder's build left the generator, as before.
  const std::string model_json = m.json().dump();
  encoder_ = train::build_model<XlmTransformer>(
      train::reuse_key("xlm-encoder", model_json, ctx.seed), ctx.device, ctx.seed,
      [&] { return XlmTransformer(xlm_options(m, false)); });
  decoder_ = train::build_model<XlmTransformer>(
      train::reuse_key("xlm-decoder", model_json, ctx.seed), ctx.device, std::nullopt,
      [&] { return XlmTransformer(xlm_options(m, true)); });
  // The fast paths (models/fast_paths.h); only the decoder's pred_layer is ever trained, so only
  // its vocabulary is padded.
  set_fast_paths(*encoder_, ctx.runtime.fast_paths, fusions(ctx.runtime));
  set_fast_paths(*decoder_, ctx.runtime.fast_paths, fusions(ctx.runtime));
  if (ctx.runtime.fast_paths) decoder_->pad_vocab_projection();

  // Two monolingual corpora, sorted and cut into token batches as XLM's iterator does; each
  // sub-step takes the batch at its quantile.
  const xlm::LengthModel lengths{m.f64("length_mean"), m.f64("length_log_sigma"), m.i64("max_len")};
  std::vector<std::vector<int64_t>> sorted(kLanguages.size());
  std::vector<std::vector<xlm::BatchBounds>> batches(kLanguages.size());
  for (std::size_t lang = 0; lang < kLanguages.size(); ++lang) {
    sorted[lang] = xlm::sort_lengths(
        xlm::sample_sentence_lengths(m.i64("corpus_sentences"), lengths,
                                     language_seed(ctx.seed, static_cast<int64_t>(lang))),
        lengths.max_words);
    batches[lang] = xlm::token_batches(sorted[lang], ctx.batch);
  }
  auto words_of = [&](std::size_t lang, double quantile) {
    const auto& all = batches[lang];
    const auto& bounds =
        all[xlm::batches_at_quantiles(static_cast<int64_t>(all.size()), {quantile})[0]];
    return std::vector<int64_t>(sorted[lang].begin() + bounds.first,
                                sorted[lang].begin() + bounds.second);
  };

  torch::manual_seed(ctx.seed + 1);
  const NoiseOptions noise{m.f64("word_shuffle"), m.f64("word_dropout"), m.f64("word_blank")};
  const int64_t vocab = m.i64("vocab_size");
  for (std::size_t lang = 0; lang < kLanguages.size(); ++lang) {
    const auto batch = xlm::make_sentence_batch(words_of(lang, kBatchQuantiles[lang]), vocab);
    // The noise is drawn here, once: XLM draws it on the host before the batch reaches the
    // GPU, and word dropout changes the lengths, so the noised batch's shape is only known
    // after a host read.
    auto [noised, noised_lengths] = add_noise(batch.x, batch.lengths, noise);
    noised_.emplace_back(noised.to(ctx.device), noised_lengths.to(ctx.device));
    ae_.push_back(make_targets(batch, ctx.device));
  }
  for (std::size_t lang = 0; lang < kLanguages.size(); ++lang) {
    const auto batch = xlm::make_sentence_batch(words_of(lang, kBatchQuantiles[2 + lang]), vocab);
    decode_lengths_.push_back(decode_length(batch.x.size(0)));
    TORCH_CHECK(decode_lengths_.back() <= m.i64("max_positions"), "back-translations of ",
                decode_lengths_.back(), " tokens exceed max_positions ", m.i64("max_positions"));
    bt_.push_back(make_targets(batch, ctx.device));
  }
  for (const auto& t : ae_) words_ += static_cast<double>(t.words);
  for (const auto& t : bt_) words_ += static_cast<double>(t.words);

  // One optimizer over both models, as XLM's parameters['model'].
  const Params& o = ctx.optimizer;
  train::ParamGroup group;
  for (const auto& p : encoder_->parameters()) group.params.push_back(p);
  for (const auto& p : decoder_->parameters()) group.params.push_back(p);
  auto adam = train::adam_options(o);
  adam.lr = o.f64("warmup_init_lr");
  // XLM's AdamInverseSqrtWithWarmup sets the rate of update n + 1 from the n updates done, so
  // the first update runs at warmup_init_lr: the shared schedule, one step behind.
  auto schedule = [base = train::inverse_sqrt(o.f64("lr"), o.i64("warmup_steps"),
                                              o.f64("warmup_init_lr"))](int64_t step) {
    return base(step - 1);
  };
  updater_ = &runtime_.add(
      "model",
      train::Updater(std::make_unique<train::Adam>(std::vector<train::ParamGroup>{group}, adam),
                     ctx.precision, ctx.device, o.f64("clip_norm"), schedule));
  back_translations_.resize(bt_.size());
}

torch::Tensor UnsupMtStep::prediction_loss(const torch::Tensor& hidden, const XlmTargets& targets) {
  // XLM's predict: the hidden states where a next word is predicted, pred_layer, mean
  // cross-entropy (no label smoothing).
  const auto selected = hidden.reshape({-1, hidden.size(-1)}).index_select(0, targets.predicted);
  if (fused_loss_) {
    const auto scores = decoder_->fast_paths ? decoder_->training_scores(selected)
                                             : decoder_->scores(selected);
    if (train::fused_vocab_loss_runs(scores)) {
      // Every predicted position has a word: no target is ignored (-1 is never one).
      const int64_t vocab = decoder_->word_embeddings().size(0);
      const auto sums =
          train::fused_vocab_loss_sums(scores, targets.labels, vocab, /*ignore_index=*/-1);
      return sums[0] / static_cast<double>(targets.labels.size(0));
    }
  }
  if (decoder_->fast_paths) {
    // cross_entropy is log_softmax then nll_loss: here the log-softmax writes fp32 from the
    // padded scores directly, whose -inf columns get probability 0 and no label.
    return torch::nll_loss(
        torch::log_softmax(decoder_->training_scores(selected), -1, torch::kFloat), targets.labels);
  }
  return torch::nn::functional::cross_entropy(decoder_->scores(selected).to(torch::kFloat),
                                              targets.labels);
}

void UnsupMtStep::train_auto_encoding(std::size_t lang) {
  // Denoising auto-encoding: noised sentence -> the sentence, in the same language.
  const auto& [noised, noised_lengths] = noised_[lang];
  const auto& target = ae_[lang];
  const auto id = static_cast<int64_t>(lang);
  updater_->zero_grad();
  torch::Tensor loss;
  {
    const auto autocast = runtime_.autocast();
    const auto encoded = encoder_->forward(noised, noised_lengths, id, /*causal=*/false);
    const auto decoded =
        decoder_->forward(target.x, target.lengths, id, /*causal=*/true, encoded, noised_lengths);
    loss = lambda_ae_ * prediction_loss(decoded, target);
  }
  runtime_.record_loss("ae_" + kLanguages[lang], loss);
  runtime_.backward(*updater_, loss);
  runtime_.update(*updater_);
}

GreedyOutput UnsupMtStep::back_translate(std::size_t lang) {
  // Translate l1 -> l2 greedily, without gradients, both models in eval mode.
  const auto& original = bt_[lang];
  const auto l1 = static_cast<int64_t>(lang), l2 = 1 - l1;
  torch::NoGradGuard no_grad;
  const auto autocast = runtime_.autocast();
  encoder_->eval();
  decoder_->eval();
  const auto encoded = encoder_->forward(original.x, original.lengths, l1, /*causal=*/false);
  GreedyOutput translation =
      decoder_->generate(encoded, original.lengths, l2, decode_lengths_[lang]);
  encoder_->train();
  decoder_->train();
  return translation;
}

void UnsupMtStep::train_back_translation(std::size_t lang, const GreedyOutput& translation,
                                         bool keep) {
  // Learn l2 -> l1 from the translation of the original l1 sentences.
  const auto& original = bt_[lang];
  const auto l1 = static_cast<int64_t>(lang), l2 = 1 - l1;
  updater_->zero_grad();
  torch::Tensor loss;
  {
    const auto autocast = runtime_.autocast();
    const auto encoded =
        encoder_->forward(translation.tokens, translation.lengths, l2, /*causal=*/false);
    const auto decoded = decoder_->forward(original.x, original.lengths, l1, /*causal=*/true,
                                           encoded, translation.lengths);
    loss = prediction_loss(decoded, original);  // XLM's bt_step applies no lambda
  }
  runtime_.record_loss("bt_" + kLanguages[l1] + "_" + kLanguages[l2] + "_" + kLanguages[l1], loss);
  // Here, as before the split: the previous iteration's translation goes before the backward.
  if (keep) back_translations_[lang] = translation;
  runtime_.backward(*updater_, loss);
  runtime_.update(*updater_);
}

double UnsupMtStep::run() {
  last_run_ = LastRun::kNone;  // set once the run is done
  if (probe_next_) {
    const double words = run_probe();
    last_run_ = LastRun::kProbe;
    return words;
  }
  // The same four updates on the same batches every time: one captured variant.
  const double words = runtime_.run(0, [&] {
    for (std::size_t lang = 0; lang < ae_.size(); ++lang) train_auto_encoding(lang);
    for (std::size_t lang = 0; lang < bt_.size(); ++lang) {
      train_back_translation(lang, back_translate(lang), /*keep=*/true);
    }
    return words_;
  });
  last_run_ = LastRun::kIteration;
  return words;
}

std::optional<double> UnsupMtStep::step_flops() const {
  if (last_run_ == LastRun::kNone) return std::nullopt;
  // Each pass's shapes are fixed when the step is built (the noise, the batches, the decode
  // lengths), so these are the shapes every run computes. Every matrix product of a training
  // pass is on the loss's graph (the embeddings' output needs a gradient): three forwards
  // each. The greedy decodes and their encoders run without gradient: forward only.
  const XlmTransformerOptions& enc = encoder_->options;
  const XlmTransformerOptions& dec = decoder_->options;
  double trained = 0, forward_only = 0;
  if (last_run_ == LastRun::kIteration) {
    for (std::size_t lang = 0; lang < ae_.size(); ++lang) {
      const XlmTargets& target = ae_[lang];
      const int64_t sentences = target.x.size(1), noised_rows = noised_[lang].first.size(0);
      trained += xlm_encoder_macs(enc, sentences, noised_rows) +
                 xlm_decoder_macs(dec, sentences, target.x.size(0), noised_rows, target.words);
    }
  }
  for (std::size_t lang = 0; lang < bt_.size(); ++lang) {
    const XlmTargets& original = bt_[lang];
    const int64_t sentences = original.x.size(1), rows = original.x.size(0);
    const int64_t translated = decode_lengths_[lang];  // the translation's rows, stand-in or not
    if (last_run_ == LastRun::kIteration) {
      forward_only += xlm_encoder_macs(enc, sentences, rows) +
                      xlm_generation_macs(dec, sentences, rows, translated);
    }
    trained += xlm_encoder_macs(enc, sentences, translated) +
               xlm_decoder_macs(dec, sentences, rows, translated, original.words);
  }
  return 2 * (3 * trained + forward_only);
}

bool UnsupMtStep::prepare_probe() {
  if (!RuntimeStep::prepare_probe()) return false;  // the optimizer state, eager steps only
  probe_next_ = true;
  return true;
}

GreedyOutput UnsupMtStep::stand_in_translation(std::size_t lang) const {
  // What generate() returns for sentences that never emit </s> early (a random model's, and
  // the longest possible): [max_len, B] with </s> first and last, every sentence max_len long.
  // The words are arbitrary; the training pass's memory depends on the shape only.
  const int64_t rows = decode_lengths_[lang], n = bt_[lang].x.size(1);
  const auto device = bt_[lang].x.device();
  const auto long_options = torch::TensorOptions().dtype(torch::kLong).device(device);
  const int64_t words = encoder_->options.n_words() - xlm::kFirstWordIndex;
  GreedyOutput out;
  out.tokens = (torch::arange(rows * n, long_options).remainder(words) + xlm::kFirstWordIndex)
                   .view({rows, n});
  out.tokens[0].fill_(xlm::kEosIndex);
  out.tokens[rows - 1].fill_(xlm::kEosIndex);
  out.lengths = torch::full({n}, rows, long_options);
  return out;
}

double UnsupMtStep::run_probe() {
  probe_next_ = false;
  // The iteration's peak is in a back-translation pass: its encoder reads the translation,
  // padded to int(1.3 S + 5) rows, where the auto-encoder's reads the noised sentence (at most
  // S rows) and both decoders read about the token budget; the greedy decodes keep no
  // activations (docs/workloads/unsupmt.md, "The search's probe"). Which of the two passes is
  // the larger changes with the budget (the smoke model: en-fr-en at 160 tokens, fr-en-fr at
  // 640), the precision and the attention kind, so the probe trains both. The stand-ins take
  // the place of the two translations a steady iteration holds at that point.
  const std::vector<GreedyOutput> stand_ins = {stand_in_translation(0), stand_in_translation(1)};
  return runtime_.run(1, [&] {
    double words = 0;
    for (std::size_t lang = 0; lang < bt_.size(); ++lang) {
      train_back_translation(lang, stand_ins[lang], /*keep=*/false);
      words += static_cast<double>(bt_[lang].words);
    }
    return words;
  });
}

std::map<std::string, std::vector<torch::Tensor>> UnsupMtStep::parameters() const {
  return {{"encoder", encoder_->parameters()}, {"decoder", decoder_->parameters()}};
}

Json UnsupMtStep::batch_info() const {
  Json steps = Json::array();
  int64_t sentences = 0;
  auto describe = [&](const std::string& name, const XlmTargets& t) {
    int64_t tokens = 0;
    for (const int64_t length : t.host_lengths) tokens += length;
    const auto n = static_cast<int64_t>(t.host_lengths.size());
    sentences += n;
    return Json{{"step", name},
                {"sentences", n},
                {"max_len", t.x.size(0)},
                {"budget_tokens", tokens},
                {"padded_tokens", n * t.x.size(0)},
                {"words", t.words}};
  };
  for (std::size_t lang = 0; lang < ae_.size(); ++lang) {
    Json info = describe("ae_" + kLanguages[lang], ae_[lang]);
    info["noised_max_len"] = noised_[lang].first.size(0);
    steps.push_back(info);
  }
  for (std::size_t lang = 0; lang < bt_.size(); ++lang) {
    Json info = describe("bt_" + kLanguages[lang], bt_[lang]);
    info["decode_len"] = decode_lengths_[lang];
    steps.push_back(info);
  }
  return Json{{"tokens_per_batch", tokens_per_batch_},
              {"sentences_per_batch", static_cast<double>(sentences) / 4.0},
              {"words_per_step", words_},
              {"batches", steps}};
}

Architecture unsupmt_architecture() {
  return make_architecture<UnsupMtStep>(
      "xlm-unsupmt",
      "XLM unsupervised MT: denoising auto-encoding + greedy on-the-fly back-translation",
      unsupmt_model_schema(), unsupmt_optimizer_schema(), [](const Params& model) {
        XlmTransformer encoder(xlm_options(model, false)), decoder(xlm_options(model, true));
        return total_parameters(encoder, decoder);
      });
}

}  // namespace gpubench::models
