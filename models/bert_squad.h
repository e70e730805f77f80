// BERT-Base fine-tuning on SQuAD 1.1 as google-research/bert's run_squad.py trains it: features
// of 384 tokens ([CLS] question [SEP] context [SEP], padded), the span head (one Linear(768, 2)
// on the sequence output, no pooler: it gets no gradient), loss (start CE + end CE) / 2, BERT's
// Adam with weight decay and warm-up. Spec: shared/specs/language-workloads.md §5.
#pragma once

#include "gpubench/base/params.h"
#include "gpubench/train/workload.h"
#include "models/bert.h"
#include "models/linear.h"

#include <torch/nn.h>

namespace gpubench::models {

/// Synthetic SQuAD features as run_squad.py's convert_examples_to_features writes them:
/// [CLS] question [SEP] context-window [SEP], then [PAD] up to the sequence length; segment ids
/// 0 then 1; an attention mask; an answer span inside the context. Question, context and answer
/// lengths are drawn per feature (shapes: config `model:` keys), deterministic from the seed.
struct SquadBatch {
  struct Lengths {
    int64_t seq_length = 384;
    int64_t question_min = 6, question_max = 24;  ///< WordPieces, <= max_query_length
    double context_mean = 160, context_std = 55;  ///< WordPieces of the context window
    int64_t context_min = 25;
    int64_t answer_max = 8;  ///< answer span length drawn in [1, answer_max]
  };
  SquadBatch(int64_t batch, const Lengths& lengths, int64_t vocab, const torch::Device& device,
             uint64_t seed);

  torch::Tensor input_ids;                       ///< [B, L] int64, 0 = [PAD]
  torch::Tensor token_type_ids;                  ///< [B, L] int64
  torch::Tensor attention_mask;                  ///< [B, L] bool, true = real token
  torch::Tensor start_positions, end_positions;  ///< [B] int64
  int64_t real_tokens = 0;                       ///< tokens that are not padding (for the record)
};

/// BERT with the SQuAD span head.
class BertForQuestionAnsweringImpl : public torch::nn::Module {
 public:
  explicit BertForQuestionAnsweringImpl(const BertOptions& options);
  /// {start logits [B, L], end logits [B, L]}.
  std::pair<torch::Tensor, torch::Tensor> forward(const SquadBatch& batch);

  BertModel bert{nullptr};
  Linear qa_outputs{nullptr};
};
TORCH_MODULE(BertForQuestionAnswering);

/// The registry entry: workload bert-finetune.
Architecture bert_squad_architecture();

}  // namespace gpubench::models
