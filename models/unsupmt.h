// Unsupervised MT as facebookresearch/XLM (9e6f681) trains it (README unsupMT_enfr recipe): a
// TransformerModel encoder and decoder (6 layers each, 1024 wide, GELU, language embeddings,
// shared by both languages). Input: token-budget batches (max_len, n_sentences) of two monolingual
// corpora. One step = one XLM iteration: denoising auto-encoding for both languages, then
// on-the-fly back-translation both ways (greedy decoding with a key/value cache, then training
// on it); four updates, each mean cross-entropy, clip 5, Adam (0.9, 0.98) with inverse-sqrt
// warm-up. Spec: shared/specs/language-workloads.md §3.
#pragma once

#include "gpubench/base/params.h"
#include "gpubench/train/runtime.h"
#include "gpubench/train/workload.h"
#include "models/fast_paths.h"
#include "models/linear.h"

#include <torch/nn.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpubench::models {

/// Shape of one XLM TransformerModel (src/model/transformer.py).
///
/// Example:
/// ```
/// XlmTransformer decoder(XlmTransformerOptions(64699, /*is_decoder=*/true).dim(1024));
/// ```
struct XlmTransformerOptions {
  XlmTransformerOptions(int64_t n_words, bool is_decoder)
      : n_words_(n_words), is_decoder_(is_decoder) {}
  /// Shared BPE vocabulary of both languages.
  TORCH_ARG(int64_t, n_words);
  /// A decoder adds encoder attention (and its LayerNorm) to every layer.
  TORCH_ARG(bool, is_decoder);
  /// Width of embeddings and hidden states. Default: 1024
  TORCH_ARG(int64_t, dim) = 1024;
  /// Transformer layers. Default: 6
  TORCH_ARG(int64_t, layers) = 6;
  /// Attention heads. Default: 8
  TORCH_ARG(int64_t, heads) = 8;
  /// Feed-forward width (XLM fixes it at 4 x dim). Default: 4096
  TORCH_ARG(int64_t, ffn_dim) = 4096;
  /// Learned positions (XLM's N_MAX_POSITIONS). Default: 512
  TORCH_ARG(int64_t, max_positions) = 512;
  /// Languages, each with a learned embedding. Default: 2
  TORCH_ARG(int64_t, n_langs) = 2;
  /// Dropout after embeddings, attention and feed-forward. Default: 0.1
  TORCH_ARG(double, dropout) = 0.1;
  /// Dropout on attention probabilities. Default: 0.1
  TORCH_ARG(double, attention_dropout) = 0.1;
  /// Epsilon of every LayerNorm. Default: 1e-12
  TORCH_ARG(double, layer_norm_eps) = 1e-12;
  /// "stored" (explicit softmax and dropout, probabilities and masks kept for the backward, as
  /// XLM's MultiHeadAttention) or "fused" (scaled_dot_product_attention); models/attention.h.
  /// Default: "stored"
  TORCH_ARG(std::string, attention) = "stored";
};

/// Multi-head attention: self-attention with one fused query/key/value projection, or
/// attention over an encoder output with a query projection and a fused key/value one (the
/// parameters of XLM's q_lin, k_lin, v_lin and out_lin, laid out for fewer matrix products).
/// Its fast path (models/fast_paths.h): q, k, v through split_heads in training passes, stored
/// attention's fast form with this module's causal masks.
class XlmAttentionImpl : public torch::nn::Module, public FastPathSwitch {
 public:
  XlmAttentionImpl(int64_t dim, int64_t heads, double dropout, bool cross,
                   std::string kind = "stored");

  /// Self-attention of x [B, L, D]. `mask`: additive key mask [B, 1, 1, L] or none; `causal`
  /// lets position i see positions <= i only.
  torch::Tensor self_attention(const torch::Tensor& x, const std::optional<torch::Tensor>& mask,
                               bool causal);
  /// One decoding position x [B, 1, D] at position `t`: writes its key and value into the caches
  /// [B, heads, max_len, D/heads] (allocated when undefined) and attends over positions 0..t.
  torch::Tensor self_attention_step(const torch::Tensor& x, torch::Tensor& key_cache,
                                    torch::Tensor& value_cache, int64_t t, int64_t max_len);
  /// Keys and values [B, heads, S, D/heads] of an encoder output [B, S, D].
  std::pair<torch::Tensor, torch::Tensor> source_keys_values(const torch::Tensor& source);
  /// Attention of x [B, L, D] over precomputed source keys and values; `mask` [B, 1, 1, S].
  torch::Tensor cross_attention(const torch::Tensor& x, const torch::Tensor& keys,
                                const torch::Tensor& values, const torch::Tensor& mask);

  int64_t dim, heads;
  double dropout;
  std::string kind;  ///< "stored" or "fused" (models/attention.h)
  Linear qkv{nullptr}, q{nullptr}, kv{nullptr}, out{nullptr};
  CausalMasks causal_masks;  ///< the fast path's, one per shape

 private:
  torch::Tensor split_heads(const torch::Tensor& x) const;  // [B, L, D] -> [B, h, L, D/h]
  torch::Tensor merge_heads(const torch::Tensor& x) const;  // [B, h, L, D/h] -> [B, L, D]
};
TORCH_MODULE(XlmAttention);

/// One post-norm layer: attention, LayerNorm (layer_norm1), [decoder: encoder attention,
/// LayerNorm (layer_norm15)], feed-forward (lin1, GELU, lin2), LayerNorm (layer_norm2); in
/// training each ending is train::residual_layer_norm, fused where runtime.fused_norm says.
class XlmLayerImpl : public torch::nn::Module, public FastPathSwitch {
 public:
  explicit XlmLayerImpl(const XlmTransformerOptions& options);

  /// Sources of encoder attention: keys, values and the additive source mask.
  struct Source {
    torch::Tensor keys, values, mask;
  };

  /// x [B, L, D] -> [B, L, D]. `self_mask` additive [B, 1, 1, L] (encoder) or none (causal
  /// decoder); `source` for a decoder.
  torch::Tensor forward(const torch::Tensor& x, const std::optional<torch::Tensor>& self_mask,
                        bool causal, const Source* source);
  /// One decoding position x [B, 1, D] at position t with the layer's key/value caches.
  torch::Tensor forward_step(const torch::Tensor& x, torch::Tensor& key_cache,
                             torch::Tensor& value_cache, int64_t t, int64_t max_len,
                             const Source& source);

  XlmTransformerOptions options;
  XlmAttention attention{nullptr}, encoder_attn{nullptr};
  torch::nn::LayerNorm layer_norm1{nullptr}, layer_norm15{nullptr}, layer_norm2{nullptr};
  Linear lin1{nullptr}, lin2{nullptr};

 private:
  torch::Tensor feed_forward(const torch::Tensor& x);
  /// norm(residual + dropout(sub)): ATen's ops, or one fused function (runtime.fused_norm).
  torch::Tensor end_sublayer(const torch::Tensor& sub, const torch::Tensor& residual,
                             torch::nn::LayerNorm& norm);
};
TORCH_MODULE(XlmLayer);

/// What greedy decoding returns, as XLM's TransformerModel.generate does.
struct GreedyOutput {
  torch::Tensor tokens;   ///< [max_len, B] int64: </s> w1 .. </s> <pad> ...
  torch::Tensor lengths;  ///< [B] int64, on the device: tokens up to and including the last </s>
};

/// XLM's TransformerModel with its output layer: word + position + language embeddings,
/// layer_norm_emb, dropout, the layers (the hidden state multiplied by the non-pad mask after
/// the embeddings and after each layer), and pred_layer (weight tied to the word embeddings,
/// its own bias). Its fast path (models/fast_paths.h): training_scores() on the padded
/// vocabulary (pad_vocab_projection(), which the training step calls).
class XlmTransformerImpl : public torch::nn::Module, public FastPathSwitch {
 public:
  explicit XlmTransformerImpl(const XlmTransformerOptions& options);

  /// x [slen, B] int64 (XLM's time-major layout), lengths [B] (device), one language id for
  /// the whole batch. A decoder takes the encoder output [B, S, D] and its lengths [B].
  /// Returns the hidden states batch-first, [B, slen, D].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& lengths, int64_t lang,
                        bool causal, const torch::Tensor& source = {},
                        const torch::Tensor& source_lengths = {});

  /// pred_layer: scores over the vocabulary for hidden states [..., D].
  torch::Tensor scores(const torch::Tensor& hidden);
  /// The scores a training loss takes: scores(), or on the fast path the scores over the
  /// padded vocabulary [..., aligned_rows(n_words)], the extra ones -inf. (Greedy decoding keeps
  /// scores(): under autocast its weight's cast is cached across the decoding steps, which a
  /// padded view's would not be.)
  torch::Tensor training_scores(const torch::Tensor& hidden);
  /// Gives pred_layer's weight (the word embeddings) and bias their padding rows, for the fast
  /// path: after the model's last move to its device, before the optimizer.
  void pad_vocab_projection();

  /// Greedy decoding into language `lang` from an encoder output [B, S, D] with lengths [B],
  /// for max_len - 1 steps (XLM's generate without its early stop: that needs a host read of
  /// "every sentence finished"; finished sentences are masked on the device instead, so the
  /// result equals XLM's up to trailing padding). Call under no-grad, in eval mode.
  /// `use_cache` false recomputes every prefix (the reference the cache is tested against).
  GreedyOutput generate(const torch::Tensor& source, const torch::Tensor& source_lengths,
                        int64_t lang, int64_t max_len, bool use_cache = true);

  /// The word embeddings, which pred_layer shares.
  const torch::Tensor& word_embeddings() const { return embeddings->weight; }

  XlmTransformerOptions options;
  torch::nn::Embedding embeddings{nullptr}, position_embeddings{nullptr}, lang_embeddings{nullptr};
  torch::nn::LayerNorm layer_norm_emb{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::Tensor pred_bias;  ///< pred_layer.proj.bias [n_words]

 private:
  /// Embeddings of tokens [B, L] at positions [L] (or [1] when decoding) in `lang`, through
  /// layer_norm_emb and dropout.
  torch::Tensor embed(const torch::Tensor& tokens, const torch::Tensor& positions, int64_t lang);
  /// Keys, values and mask of an encoder output for every layer.
  std::vector<XlmLayerImpl::Source> sources(const torch::Tensor& source,
                                            const torch::Tensor& source_lengths);
};
TORCH_MODULE(XlmTransformer);

// ---- Noise of the denoising auto-encoder (XLM Trainer.add_noise), vectorized ----
// Every function takes a batch (x [slen, B] with </s> at row 0 and at lengths - 1, lengths [B])
// and the random draws it needs, so tests can hand-make them. Row 0 and the final </s> never
// move, drop or blank.

/// word_shuffle: each word moves by sorting arange(len - 1) + noise, noise [slen - 1, B] drawn
/// uniformly from [0, k) (row 0 is ignored: the start symbol stays first).
torch::Tensor word_shuffle(const torch::Tensor& x, const torch::Tensor& lengths,
                           const torch::Tensor& noise);
/// word_dropout: drops the words where keep [slen - 1, B] is false; a sentence left with no
/// word keeps the word at `fallback` [B] (a position in [1, len - 2], XLM's random pick).
/// Returns the new batch (rows cut to the longest new sentence) and lengths. Reads that longest
/// length on the host, so it runs when a step is built, never inside run().
std::pair<torch::Tensor, torch::Tensor> word_dropout(const torch::Tensor& x,
                                                     const torch::Tensor& lengths,
                                                     const torch::Tensor& keep,
                                                     const torch::Tensor& fallback);
/// word_blank: replaces the words where keep [slen - 1, B] is false by the mask word.
torch::Tensor word_blank(const torch::Tensor& x, const torch::Tensor& lengths,
                         const torch::Tensor& keep);

/// Strength of the three noises (XLM's --word_shuffle, --word_dropout, --word_blank).
struct NoiseOptions {
  double shuffle = 3;    ///< k of word_shuffle; 0 = off
  double dropout = 0.1;  ///< probability of dropping a word; 0 = off
  double blank = 0.1;    ///< probability of blanking a word; 0 = off
};

/// add_noise: shuffle, drop, blank, in XLM's order, with draws from libtorch's default CPU
/// generator. Inputs on the CPU; returns the noised batch and its lengths.
std::pair<torch::Tensor, torch::Tensor> add_noise(const torch::Tensor& x,
                                                  const torch::Tensor& lengths,
                                                  const NoiseOptions& options);

// ---- The workload ----

/// Target side of a training pass: the sentences, their lengths, and where the decoder
/// predicts: flat indices into its [B, slen] output (positions 0 .. len - 2) and the next words
/// there, all precomputed on the host so the loss needs no boolean indexing (which would read
/// a count on the host).
struct XlmTargets {
  torch::Tensor x;        ///< [slen, B] int64, on the device
  torch::Tensor lengths;  ///< [B] int64, on the device
  std::vector<int64_t> host_lengths;
  torch::Tensor predicted;  ///< [sum(len - 1)] int64: b * slen + position
  torch::Tensor labels;     ///< [sum(len - 1)] int64: x[position + 1, b]
  int64_t words = 0;        ///< sum(len - 1): what XLM adds to processed_w
};

/// One XLM iteration on fixed synthetic batches: mt_step(l, l) for both languages (denoising
/// auto-encoding), then bt_step(l1, l2, l1) for both directions (greedy back-translation under
/// no-grad in eval mode, then a training pass on it). Four updates.
class UnsupMtStep final : public train::RuntimeStep {
 public:
  explicit UnsupMtStep(const StepContext& ctx);

  double run() override;
  std::map<std::string, std::vector<torch::Tensor>> parameters() const override;
  Json batch_info() const override;
  /// Readies a one-run search probe (TrainStep::prepare_probe): the optimizer state of both
  /// models allocated, and the next run() trains only the two back-translation passes, where a
  /// steady iteration peaks, each on a stand-in translation of the decoded shape (every
  /// sentence decode_lengths() long): no auto-encoding pass, no greedy decode. The run after
  /// it is a whole iteration again. False with CUDA graphs (then the probe runs two iterations).
  bool prepare_probe() override;
  /// The last run()'s training FLOPs from its batches' shapes (docs/workloads/unsupmt.md,
  /// "FLOPs"): both auto-encoding passes and both back-translations (encoder and greedy
  /// generation, forward only; the training pass on the translation's decode_lengths() rows),
  /// or the probe's two back-translation passes; every matrix product at the padded shapes.
  std::optional<double> step_flops() const override;

  /// The back-translations the last run() generated, one per direction (en-fr-en, fr-en-fr);
  /// with CUDA graphs, those of the run that captured the iteration.
  const std::vector<GreedyOutput>& back_translations() const { return back_translations_; }
  /// The source batches of the back-translation steps.
  const std::vector<XlmTargets>& back_translation_batches() const { return bt_; }
  /// The noised encoder inputs of the auto-encoding steps (x, lengths) and their targets.
  const std::vector<std::pair<torch::Tensor, torch::Tensor>>& noised() const { return noised_; }
  const std::vector<XlmTargets>& auto_encoding_targets() const { return ae_; }
  /// Greedy decoding length of each back-translation step: int(1.3 * max(len) + 5).
  const std::vector<int64_t>& decode_lengths() const { return decode_lengths_; }
  /// The models.
  XlmTransformer& encoder() { return encoder_; }
  XlmTransformer& decoder() { return decoder_; }
  /// The learning rate of the next update.
  double learning_rate() const { return updater_->optimizer().lr(); }

 private:
  torch::Tensor prediction_loss(const torch::Tensor& hidden, const XlmTargets& targets);
  // The sub-steps of an iteration, in its order (run() calls them inside runtime_.run).
  /// mt_step(l, l): one update on the auto-encoding batch of language `lang`.
  void train_auto_encoding(std::size_t lang);
  /// bt_step's first half: the greedy translation of back-translation batch `lang`.
  GreedyOutput back_translate(std::size_t lang);
  /// bt_step's second half: one update on `translation` -> the original; `keep` stores the
  /// translation as back_translations()[lang].
  void train_back_translation(std::size_t lang, const GreedyOutput& translation, bool keep);
  /// A translation of batch `lang` of the shape back_translate() gives it, with no decoding.
  GreedyOutput stand_in_translation(std::size_t lang) const;
  /// The probe's run(): both back-translation passes on stand-ins (prepare_probe()).
  double run_probe();

  double lambda_ae_;
  int64_t tokens_per_batch_;
  bool fused_loss_;  // runtime.fused_loss
  XlmTransformer encoder_{nullptr}, decoder_{nullptr};
  std::vector<XlmTargets> ae_, bt_;                              // per language
  std::vector<std::pair<torch::Tensor, torch::Tensor>> noised_;  // AE encoder inputs
  std::vector<int64_t> decode_lengths_;
  std::vector<GreedyOutput> back_translations_;
  train::Updater* updater_ = nullptr;
  double words_ = 0;
  bool probe_next_ = false;  // prepare_probe() was called: the next run() is the probe's
  enum class LastRun { kNone, kIteration, kProbe };
  LastRun last_run_ = LastRun::kNone;  // what the last run() trained (step_flops())
};

/// Forward multiply-adds of XLM's transformer passes (docs/workloads/unsupmt.md, "FLOPs"),
/// matrix products only, on `sentences` sentences padded to `rows` tokens.
/// The encoder: per layer and token the fused Q, K, V and the output projection (4 d^2) and the
/// feed-forward (2 d ffn), the scores and context over all rows (2 rows^2 d).
double xlm_encoder_macs(const XlmTransformerOptions& options, int64_t sentences, int64_t rows);
/// The decoder on `rows` target rows over a source of `source_rows`: per layer and token the
/// self-attention's projections, the encoder attention's query and output (6 d^2 in all) and
/// the feed-forward, the scores and context of both attentions (2 rows^2 d + 2 rows source d);
/// per layer and source token its keys and values (2 d^2); pred_layer (d V) on the `predicted`
/// positions only.
double xlm_decoder_macs(const XlmTransformerOptions& options, int64_t sentences, int64_t rows,
                        int64_t source_rows, int64_t predicted);
/// XlmTransformerImpl::generate with the cache for `max_len` rows: the source's keys and values
/// once, then for each of max_len - 1 positions t, every sentence (finished ones included), per
/// layer the 6 d^2 projections, the feed-forward, the scores and context over t + 1 cached
/// positions and over the source, and pred_layer (d V).
double xlm_generation_macs(const XlmTransformerOptions& options, int64_t sentences,
                           int64_t source_rows, int64_t max_len);

/// The keys of the unsupmt `model:` section.
ParamSchema unsupmt_model_schema();
/// The keys of its `optimizer:` section: XLM's adam_inverse_sqrt and --clip_grad_norm.
ParamSchema unsupmt_optimizer_schema();
/// XlmTransformerOptions of the encoder or decoder from a `model:` section.
XlmTransformerOptions xlm_options(const Params& model, bool is_decoder);

/// The registry entry: workload unsupmt.
Architecture unsupmt_architecture();

}  // namespace gpubench::models
