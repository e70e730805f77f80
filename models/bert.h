// BERT (Devlin et al. 2018) as google-research/bert builds it: the shared encoder, and the
// pretraining workload (masked LM on 20 gathered positions of 128 + next sentence, BERT's Adam
// with weight decay and no bias correction, gradient clipping 1.0). The same code, configured
// as Hugging Face's BertForMaskedLM (no pooler, no next sentence, LM logits at every position),
// is the bert-base-mlm twin. Spec: shared/specs/language-workloads.md §4.
#pragma once

#include "gpubench/base/params.h"
#include "gpubench/train/update.h"
#include "gpubench/train/workload.h"
#include "models/fast_paths.h"
#include "models/linear.h"

#include <torch/nn.h>

#include <optional>
#include <string>
#include <utility>

namespace gpubench::models {

/// WordPiece ids of BERT's uncased vocabulary that the synthetic batches of bert-base,
/// bert-finetune and mt-dnn place: [CLS], [SEP], and the first id of an ordinary word (below it
/// are [PAD], [unused*], [UNK], [CLS], [SEP], [MASK]).
inline constexpr int64_t kCls = 101;
inline constexpr int64_t kSep = 102;
inline constexpr int64_t kFirstWordId = 1000;

/// Shape and regularization of a BERT encoder.
///
/// Example:
/// ```
/// BertModel bert(BertOptions(30522).hidden_size(768).layers(12).heads(12));
/// ```
struct BertOptions {
  explicit BertOptions(int64_t vocab_size) : vocab_size_(vocab_size) {}
  /// WordPiece vocabulary size.
  TORCH_ARG(int64_t, vocab_size);
  /// Width of every hidden state. Default: 768
  TORCH_ARG(int64_t, hidden_size) = 768;
  /// Transformer layers. Default: 12
  TORCH_ARG(int64_t, layers) = 12;
  /// Attention heads per layer. Default: 12
  TORCH_ARG(int64_t, heads) = 12;
  /// Width of the feed-forward layer. Default: 3072
  TORCH_ARG(int64_t, intermediate_size) = 3072;
  /// Learned positions. Default: 512
  TORCH_ARG(int64_t, max_positions) = 512;
  /// Segment (token type) ids. Default: 2
  TORCH_ARG(int64_t, type_vocab_size) = 2;
  /// Dropout after embeddings, attention output and feed-forward. Default: 0.1
  TORCH_ARG(double, hidden_dropout) = 0.1;
  /// Dropout on attention probabilities. Default: 0.1
  TORCH_ARG(double, attention_dropout) = 0.1;
  /// "stored" (explicit softmax, probabilities and dropout masks kept for the backward, as
  /// google-research/bert) or "fused" (scaled_dot_product_attention); models/attention.h.
  /// Default: "stored"
  TORCH_ARG(std::string, attention) = "stored";
  /// LayerNorm epsilon. Default: 1e-12
  TORCH_ARG(double, layer_norm_eps) = 1e-12;
  /// GELU form: "tanh" (the TF original) or "erf" (PyTorch ports). Default: "tanh"
  TORCH_ARG(std::string, gelu) = "tanh";
  /// Build the pooler (dense + tanh on [CLS]). Default: true
  TORCH_ARG(bool, pooler) = true;
  /// Std of the (truncated) normal initializer. Default: 0.02
  TORCH_ARG(double, init_range) = 0.02;
};

/// The keys of the encoder shape every BERT workload's `model:` section has.
ParamSchema bert_encoder_schema();
/// BertOptions from a resolved `model:` section with bert_encoder_schema()'s keys.
BertOptions bert_options(const Params& model);

/// GELU in the configured form.
torch::Tensor bert_gelu(const torch::Tensor& x, const std::string& form);

/// Forward multiply-adds of the encoder's layers on `sequences` sequences of `length` positions
/// each, padding included (it is computed): per layer and position the Q, K, V and output
/// projections (4 h^2) and the feed-forward (2 h x intermediate), and per layer and sequence the
/// attention's scores and context (2 L^2 h). Not the embeddings (look-ups) nor the pooler.
double bert_encoder_macs(const BertOptions& options, int64_t sequences, int64_t length);

/// Word + position + segment embeddings, LayerNorm, dropout.
class BertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit BertEmbeddingsImpl(const BertOptions& options);
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids);

  torch::nn::Embedding word{nullptr}, position{nullptr}, token_type{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(BertEmbeddings);

/// One post-LayerNorm transformer layer: self-attention (fused QKV projection, attention stored
/// or fused as options.attention() says), then the feed-forward block. Its fast path
/// (models/fast_paths.h): q, k, v through split_heads, stored attention's fast form; each
/// sub-layer ends in train::residual_layer_norm, fused where runtime.fused_norm says.
class BertLayerImpl : public torch::nn::Module, public FastPathSwitch {
 public:
  explicit BertLayerImpl(const BertOptions& options);
  /// `mask`: additive attention mask [B, 1, 1, L] (0 keep, -inf drop), or none.
  torch::Tensor forward(const torch::Tensor& x, const std::optional<torch::Tensor>& mask);

  BertOptions options;
  Linear qkv{nullptr}, attention_out{nullptr}, intermediate{nullptr}, output{nullptr};
  torch::nn::LayerNorm attention_norm{nullptr}, output_norm{nullptr};
};
TORCH_MODULE(BertLayer);

/// The encoder: embeddings, the layers and (optionally) the pooler.
class BertModelImpl : public torch::nn::Module {
 public:
  explicit BertModelImpl(const BertOptions& options);
  /// input_ids, token_type_ids: [B, L] int64. attention_mask: [B, L] bool (true = real token)
  /// or none when nothing is padded. Returns {sequence output [B, L, H], pooled output [B, H]
  /// (undefined without a pooler)}.
  std::pair<torch::Tensor, torch::Tensor> forward(
      const torch::Tensor& input_ids, const torch::Tensor& token_type_ids,
      const std::optional<torch::Tensor>& attention_mask = std::nullopt);

  /// The word-embedding table, which the masked-LM output layer shares.
  const torch::Tensor& word_embeddings() const { return embeddings->word->weight; }

  BertOptions options;
  BertEmbeddings embeddings{nullptr};
  torch::nn::ModuleList layers{nullptr};
  Linear pooler{nullptr};
};
TORCH_MODULE(BertModel);

/// Initializes Linear and Embedding weights with the truncated normal N(0, init_range)
/// clipped at two standard deviations (TF's truncated_normal_initializer), biases with zeros
/// and LayerNorms with ones and zeros.
void init_bert_weights(torch::nn::Module& module, double init_range);

/// BERT pretraining heads on an encoder: the masked-LM transform (dense + GELU + LayerNorm),
/// the output layer tied to the word embeddings with its own bias, and next-sentence
/// prediction on the pooled output. Its fast path (models/fast_paths.h): the output layer on
/// the padded vocabulary (pad_vocab_projection(), which the training step calls).
class BertForPretrainingImpl : public torch::nn::Module, public FastPathSwitch {
 public:
  BertForPretrainingImpl(const BertOptions& options, bool next_sentence);
  /// Masked-LM logits for hidden states [..., H] -> [..., vocab]; on the fast path
  /// [..., aligned_rows(vocab)], the extra ones -inf.
  torch::Tensor lm_logits(const torch::Tensor& hidden);
  /// Gives the output layer's weight (the word embeddings) and bias their padding rows, for
  /// the fast path: after the model's last move to its device, before the optimizer.
  void pad_vocab_projection();

  BertModel bert{nullptr};
  Linear transform{nullptr};
  torch::nn::LayerNorm transform_norm{nullptr};
  torch::Tensor output_bias;
  Linear next_sentence{nullptr};  ///< null without next-sentence prediction
};
TORCH_MODULE(BertForPretraining);

/// Synthetic pretraining examples as create_pretraining_data.py writes them, generated once on
/// the device: [CLS] A [SEP] B [SEP] at full length with segment ids, `masked` distinct masked
/// positions per sequence (never a special token) with their original ids (80% of the inputs
/// become [MASK], 10% a random word, 10% stay), and random next-sentence labels.
struct PretrainingBatch {
  PretrainingBatch(int64_t batch, int64_t length, int64_t masked, int64_t vocab,
                   const torch::Device& device, uint64_t seed);

  torch::Tensor input_ids;         ///< [B, L] int64
  torch::Tensor token_type_ids;    ///< [B, L] int64: 0 for [CLS] A [SEP], 1 after
  torch::Tensor masked_positions;  ///< [B, masked] int64, sorted
  torch::Tensor masked_ids;        ///< [B, masked] int64: the original ids there
  torch::Tensor next_sentence;     ///< [B] int64 in {0, 1}
  torch::Tensor lm_labels;         ///< [B, L]: masked ids at masked positions, -100 elsewhere
};

/// The masked-LM loss of `model` on `batch` given the encoder output `sequence`:
/// - all_positions false (google-research/bert): logits at the gathered masked positions,
///   sum(w * nll) / (sum(w) + 1e-5) with every weight 1;
/// - all_positions true (Hugging Face): logits at every position, mean cross-entropy over the
///   labelled ones.
/// On the model's fast path the logits are the padded ones, and log-softmax writes fp32 from
/// them directly (no fp32 copy of the logits first). `fused` (runtime.fused_loss): the same
/// loss from train::fused_vocab_loss_sums where it runs.
torch::Tensor masked_lm_loss(BertForPretrainingImpl& model, const torch::Tensor& sequence,
                             const PretrainingBatch& batch, bool all_positions,
                             bool fused = false);

/// The keys of a BERT workload's `optimizer:` section: google-research/bert's
/// AdamWeightDecayOptimizer ("bert-adam": no bias correction, decoupled decay skipping
/// LayerNorm and bias) or torch AdamW ("adamw", Hugging Face's Trainer default), global-norm
/// clipping, linear warm-up and decay.
ParamSchema bert_optimizer_schema();
/// The optimizer, clipping and schedule of a `optimizer:` section with bert_optimizer_schema()'s
/// keys, over `module`'s parameters.
train::Updater make_bert_updater(const torch::nn::Module& module, const Params& optimizer,
                                 Precision precision, const torch::Device& device);

/// The registry entry: workloads bert-base and bert-base-mlm.
Architecture bert_pretraining_architecture();

}  // namespace gpubench::models
