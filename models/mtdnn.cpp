#include "models/mtdnn.h"

#include "gpubench/config/config.h"
#include "gpubench/train/model_reuse.h"
#include "gpubench/train/runtime.h"
#include "models/workload_common.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gpubench::models {

namespace {

ParamSchema mtdnn_schema() {
  return bert_encoder_schema().with({
      {"max_seq_length", ParamKind::kInt, 512, "longer training examples are dropped", {}, 8},
      {"task_names", ParamKind::kStringList, Json::array(), "GLUE tasks, one head each"},
      {"task_heads",
       ParamKind::kStringList,
       Json::array(),
       "per task: san (answer module), linear (dropout + Linear on the pooled output), "
       "regression (Linear to 1, MSE)",
       {"san", "linear", "regression"}},
      {"task_classes", ParamKind::kIntList, Json::array(), "per task: output classes", {}, 1},
      {"task_dropout", ParamKind::kNumberList, Json::array(), "per task: dropout_p", {}, 0},
      {"task_train_sizes",
       ParamKind::kIntList,
       Json::array(),
       "per task: training examples, the sampling weight",
       {},
       1},
      {"task_segments",
       ParamKind::kIntList,
       Json::array(),
       "per task: 2 for sentence pairs, 1 for single sentences",
       {},
       1},
      {"task_length_median",
       ParamKind::kNumberList,
       Json::array(),
       "per task: median example length in WordPieces, specials included",
       {},
       3},
      {"task_length_sigma",
       ParamKind::kNumberList,
       Json::array(),
       "per task: spread of the log-normal length distribution",
       {},
       0},
      {"san_turns", ParamKind::kInt, 5, "SAN reasoning turns (answer_num_turn)", {}, 1},
      {"san_memory_dropout",
       ParamKind::kNumber,
       0.1,
       "SAN turn dropout (answer_mem_drop_p)",
       {},
       0},
      {"task_order",
       ParamKind::kString,
       "proportional",
       "proportional: tasks drawn in proportion to train sizes (the recipe); cycle: in turn",
       {"proportional", "cycle"}},
      {"cycle_steps",
       ParamKind::kInt,
       24,
       "proportional: steps of the timed cycle, split among the tasks by train size, each draw "
       "its own batch (the timed window is whole cycles)",
       {},
       1},
  });
}

ParamSchema adamax_schema() {
  return {
      {"name",
       ParamKind::kString,
       "adamax",
       "MT-DNN's BERT-style Adamax (module/bert_optim.py)",
       {"adamax"}},
      {"lr", ParamKind::kNumber, 5e-5, "peak learning rate", {}, 0},
      {"beta1", ParamKind::kNumber, 0.9, "first-moment decay", {}, 0},
      {"beta2", ParamKind::kNumber, 0.999, "infinity-norm decay", {}, 0},
      {"eps", ParamKind::kNumber, 1e-6, "epsilon", {}, 0},
      {"weight_decay",
       ParamKind::kNumber,
       0.01,
       "decoupled decay, not on bias or LayerNorm",
       {},
       0},
      {"clip_norm",
       ParamKind::kNumber,
       1.0,
       "global gradient-norm clip (global_grad_clipping)",
       {},
       0},
      {"warmup_steps", ParamKind::kInt, 0, "linear warm-up steps (warmup 0.1 of total)", {}, 0},
      {"total_steps", ParamKind::kInt, 1000000, "steps of the linear decay", {}, 1},
  };
}

}  // namespace

torch::Tensor variational_dropout(const torch::Tensor& x, double p, bool training) {
  if (!training || p == 0) return x;
  if (x.dim() == 3) {
    auto keep = torch::empty({x.size(0), 1, x.size(2)}, x.options()).bernoulli_(1 - p);
    return x * keep / (1 - p);
  }
  return torch::dropout(x, p, training);
}

// ---- SAN ----

SanClassifierImpl::SanClassifierImpl(const SanOptions& o) : options(o) {
  const int64_t h = o.hidden();
  query_wsum = register_module("query_wsum", Linear(h, 1));
  attention = register_module("attention", Linear(h, h));  // bilinear x W y
  rnn = register_module("rnn", torch::nn::GRUCell(h, h));
  classifier = register_module("classifier", Linear(4 * h, o.classes()));
}

torch::Tensor SanClassifierImpl::forward(const torch::Tensor& x, const torch::Tensor& h,
                                         const torch::Tensor& x_mask, const torch::Tensor& h_mask) {
  const double p = options.dropout();
  const bool training = is_training();
  const double inf = std::numeric_limits<double>::infinity();
  // The initial state: a linear self-attention summary of the first segment.
  auto hd = variational_dropout(h, p, training);
  auto alpha = torch::softmax(query_wsum(hd).squeeze(-1).masked_fill(h_mask, -inf), 1);
  auto state = torch::bmm(alpha.unsqueeze(1), hd).squeeze(1);
  std::vector<torch::Tensor> probs;
  for (int64_t turn = 0; turn < options.turns(); ++turn) {
    auto xd = variational_dropout(x, p, training);
    auto wy = attention(variational_dropout(state, p, training));
    auto scores = torch::bmm(xd, wy.unsqueeze(2)).squeeze(2).masked_fill(x_mask, -inf);
    auto summary = torch::bmm(torch::softmax(scores, 1).unsqueeze(1), x).squeeze(1);
    auto features = torch::cat({summary, state, (summary - state).abs(), summary * state}, 1);
    probs.push_back(torch::softmax(classifier(variational_dropout(features, p, training)), 1));
    state = rnn(summary, variational_dropout(state, p, training));
  }
  // answer_mem_type 1: average the turns under a random turn mask (one turn always kept).
  const int64_t batch = x.size(0), turns = options.turns();
  auto keep = torch::ones({batch, turns}, probs[0].options());
  if (training && options.memory_dropout() > 0) {
    const double q = options.memory_dropout();
    keep = keep.bernoulli_(1 - q);
    auto forced = torch::randint(0, turns, {batch, 1}, keep.options().dtype(torch::kLong));
    keep = keep.scatter(1, forced, 1.0) / (1 - q);
  }
  auto stacked = torch::stack(probs, 2) * keep.unsqueeze(1);
  return torch::log(stacked.mean(2));
}

// ---- Tasks and model ----

std::vector<GlueTask> glue_tasks(const Params& m) {
  const auto names = m.strs("task_names");
  const auto heads = m.strs("task_heads");
  const auto classes = m.i64s("task_classes");
  const auto dropout = m.f64s("task_dropout");
  const auto sizes = m.i64s("task_train_sizes");
  const auto segments = m.i64s("task_segments");
  const auto medians = m.f64s("task_length_median");
  const auto sigmas = m.f64s("task_length_sigma");
  const std::size_t n = names.size();
  TORCH_CHECK(n > 0, "mt-dnn needs at least one task");
  TORCH_CHECK(heads.size() == n && classes.size() == n && dropout.size() == n &&
                  sizes.size() == n && segments.size() == n && medians.size() == n &&
                  sigmas.size() == n,
              "every task_* list needs one entry per task in task_names");
  std::vector<GlueTask> tasks;
  for (std::size_t i = 0; i < n; ++i) {
    GlueTask t;
    t.name = names[i];
    t.head = heads[i];
    t.classes = classes[i];
    t.dropout = dropout[i];
    t.train_size = sizes[i];
    t.segments = segments[i];
    t.length_median = medians[i];
    t.length_sigma = sigmas[i];
    TORCH_CHECK(t.head != "san" || t.segments == 2, t.name, ": a SAN head needs sentence pairs");
    TORCH_CHECK(t.head != "regression" || t.classes == 1, t.name, ": regression has 1 output");
    tasks.push_back(t);
  }
  return tasks;
}

MtDnnImpl::MtDnnImpl(const BertOptions& encoder, const std::vector<GlueTask>& task_list,
                     int64_t san_turns, double san_memory_dropout)
    : tasks(task_list) {
  TORCH_CHECK(encoder.pooler(), "mt-dnn's linear heads read the pooled output");
  bert = register_module("bert", BertModel(encoder));
  heads = register_module("heads", torch::nn::ModuleList());
  const int64_t h = encoder.hidden_size();
  for (const auto& t : tasks) {
    if (t.head == "san") {
      heads->push_back(SanClassifier(SanOptions(h, t.classes)
                                         .turns(san_turns)
                                         .memory_dropout(san_memory_dropout)
                                         .dropout(t.dropout)));
    } else {
      heads->push_back(Linear(h, t.classes));
    }
  }
  init_bert_weights(*this, encoder.init_range());
}

torch::Tensor MtDnnImpl::forward(int64_t t, const torch::Tensor& input_ids,
                                 const torch::Tensor& token_type_ids,
                                 const torch::Tensor& attention_mask,
                                 const torch::Tensor& premise_mask,
                                 const torch::Tensor& hypothesis_mask) {
  const GlueTask& task = tasks.at(static_cast<std::size_t>(t));
  auto [sequence, pooled] = bert->forward(input_ids, token_type_ids, attention_mask);
  if (task.head == "san") {
    // matcher.py: the "hypothesis" memory is the first max-hypothesis-length positions.
    auto first = sequence.slice(1, 0, hypothesis_mask.size(1));
    return heads[t]->as<SanClassifier>()->forward(sequence, first, premise_mask, hypothesis_mask);
  }
  auto out =
      heads[t]->as<LinearImpl>()->forward(variational_dropout(pooled, task.dropout, is_training()));
  return task.head == "regression" ? out.squeeze(-1) : out;
}

BatchMacs mtdnn_batch_macs(const BertOptions& encoder, const GlueTask& task, int64_t san_turns,
                           int64_t sequences, int64_t length, int64_t first_length) {
  const auto b = static_cast<double>(sequences);
  const auto h = static_cast<double>(encoder.hidden_size());
  const auto l = static_cast<double>(length);
  const auto classes = static_cast<double>(task.classes);
  BatchMacs m;
  m.trained = bert_encoder_macs(encoder, sequences, length);
  const double pooler = b * h * h;  // computed for every task
  if (task.head != "san") {
    m.trained += pooler + b * h * classes;
    return m;
  }
  // SAN: the initial state's linear self-attention over the first segment (query_wsum and its
  // weighted sum), then per turn the bilinear attention Linear(h, h), the scores and summary
  // over all `length` positions, the classifier on [x, h, |x - h|, x * h] and a GRU cell (input
  // and hidden projections, 6 h^2). The last turn's GRU update and the pooler are not on the
  // loss's graph: forward only.
  const auto turns = static_cast<double>(san_turns);
  const auto first = static_cast<double>(first_length);
  m.trained += b * (2 * first * h + turns * (h * h + 2 * l * h + 4 * h * classes) +
                    (turns - 1) * 6 * h * h);
  m.forward_only = pooler + b * 6 * h * h;
  return m;
}

// ---- Synthetic GLUE batches ----

int64_t longest_example(const GlueTask& t, int64_t max_length) {
  // z at 1 - 1/n of the standard normal: sqrt(2) erfinv(1 - 2/n).
  const double p = 1.0 - 2.0 / static_cast<double>(std::max<int64_t>(t.train_size, 3));
  const double z = std::sqrt(2.0) * torch::erfinv(torch::tensor(p, torch::kDouble)).item<double>();
  const double length = std::round(t.length_median * std::exp(t.length_sigma * z));
  return std::min<int64_t>(max_length, static_cast<int64_t>(length));
}

std::vector<int64_t> proportional_schedule(const std::vector<double>& weights, int64_t length) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<double> credit(weights.size(), 0.0);
  std::vector<int64_t> order;
  for (int64_t i = 0; i < length; ++i) {
    for (std::size_t t = 0; t < weights.size(); ++t) credit[t] += weights[t];
    const auto best = std::max_element(credit.begin(), credit.end()) - credit.begin();
    credit[static_cast<std::size_t>(best)] -= total;
    order.push_back(best);
  }
  return order;
}

std::vector<int64_t> apportion(const std::vector<double>& weights, int64_t steps) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> counts;
  std::vector<std::pair<double, std::size_t>> remainders;
  int64_t given = 0;
  for (std::size_t t = 0; t < weights.size(); ++t) {
    const double exact = static_cast<double>(steps) * weights[t] / total;
    counts.push_back(static_cast<int64_t>(std::floor(exact)));
    given += counts.back();
    remainders.emplace_back(exact - std::floor(exact), t);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t i = 0; given < steps; ++i, ++given) ++counts[remainders[i].second];
  return counts;
}

int64_t batch_padded_length(const GlueTask& t, int64_t batch, double q, int64_t max_length) {
  const double p = std::pow(q, 1.0 / static_cast<double>(std::max<int64_t>(batch, 1)));
  const double z =
      std::sqrt(2.0) * torch::erfinv(torch::tensor(2 * p - 1, torch::kDouble)).item<double>();
  const double length = std::round(t.length_median * std::exp(t.length_sigma * z));
  const int64_t shortest = t.segments == 2 ? 5 : 3;
  return std::clamp<int64_t>(static_cast<int64_t>(length), shortest, max_length);
}

GlueCycle glue_cycle(const std::vector<GlueTask>& tasks, int64_t batch, int64_t max_length,
                     int64_t cycle_steps, bool proportional) {
  GlueCycle c;
  const auto n = static_cast<int64_t>(tasks.size());
  if (proportional) {
    std::vector<double> weights;
    for (const auto& t : tasks) weights.push_back(static_cast<double>(t.train_size));
    c.counts = apportion(weights, cycle_steps);
  } else {
    c.counts.assign(tasks.size(), 1);
  }
  const int64_t length = std::accumulate(c.counts.begin(), c.counts.end(), int64_t{0});
  // Integer weights summing to the cycle's length: the smooth round robin gives each task
  // exactly its count in those steps.
  const auto order =
      proportional_schedule(std::vector<double>(c.counts.begin(), c.counts.end()), length);
  std::vector<int64_t> drawn(tasks.size(), 0);
  for (const int64_t t : order) c.steps.emplace_back(t, drawn[static_cast<std::size_t>(t)]++);
  for (int64_t t = 0; t < n; ++t) {
    const auto& task = tasks[static_cast<std::size_t>(t)];
    const int64_t k = std::max<int64_t>(1, c.counts[static_cast<std::size_t>(t)]);
    std::vector<int64_t> lengths;
    for (int64_t j = 0; j < k; ++j) {
      const double q = (static_cast<double>(j) + 0.5) / static_cast<double>(k);
      lengths.push_back(batch_padded_length(task, batch, q, max_length));
    }
    c.lengths.push_back(lengths);
  }
  return c;
}

GlueBatch::GlueBatch(const GlueTask& t, int64_t task_index, int64_t batch, int64_t max_length,
                     int64_t vocab, const torch::Device& device, uint64_t seed, int64_t longest)
    : task(task_index) {
  torch::manual_seed(seed + 100 + static_cast<uint64_t>(task_index));
  const auto i64 = torch::TensorOptions().dtype(torch::kLong);
  const int64_t min_length = t.segments == 2 ? 5 : 3;
  // Example lengths: log-normal around the task's median; examples longer than max_seq_length
  // are dropped by the reference loader, so they are clipped to it here.
  auto lengths =
      (torch::randn({batch}, torch::kDouble) * t.length_sigma + std::log(t.length_median))
          .exp()
          .round()
          .clamp(static_cast<double>(min_length), static_cast<double>(max_length))
          .to(torch::kLong);
  if (longest > 0) {
    lengths = lengths.clamp_max(longest);
    lengths[0] = longest;
  }
  // First segment ([CLS] s1 [SEP]): 30-70% of a pair; the whole of a single sentence.
  auto first = lengths.clone();
  if (t.segments == 2) {
    auto share = torch::rand({batch}, torch::kDouble) * 0.4 + 0.3;
    first = (lengths.to(torch::kDouble) * share).round().to(torch::kLong);
    first = torch::max(torch::min(first, lengths - 2), torch::full_like(first, 3));
  }
  length = lengths.max().item<int64_t>();  // CPU tensors: host data built before any step
  const int64_t first_max = first.max().item<int64_t>();
  auto positions = torch::arange(length, i64).unsqueeze(0).expand({batch, length});
  auto len = lengths.unsqueeze(1), cut = first.unsqueeze(1);
  const int64_t first_word = std::min(kFirstWordId, vocab / 2);
  auto ids = torch::randint(first_word, vocab, {batch, length}, i64)
                 .masked_fill(positions == 0, kCls)
                 .masked_fill(positions == cut - 1, kSep)
                 .masked_fill(positions == len - 1, kSep)
                 .masked_fill(positions >= len, 0);
  auto real = positions < len;
  auto second = (positions >= cut) & real;
  input_ids = ids.to(device);
  token_type_ids = second.to(torch::kLong).to(device);
  attention_mask = real.to(device);
  premise_mask = second.logical_not().to(device);
  hypothesis_mask =
      (torch::arange(first_max, i64).unsqueeze(0).expand({batch, first_max}) >= cut).to(device);
  labels = t.head == "regression"
               ? (torch::rand({batch}) * 5.0).to(device)  // STS-B similarity in [0, 5]
               : torch::randint(0, t.classes, {batch}, i64).to(device);
}

namespace {

class MtDnnStep final : public train::RuntimeStep {
 public:
  explicit MtDnnStep(const StepContext& ctx)
      : RuntimeStep(ctx),
        tasks_(glue_tasks(ctx.model)),
        model_(build(ctx, tasks_)),
        updater_(runtime_.add("model", make_updater(*model_, ctx))) {
    const int64_t max_length = ctx.model.i64("max_seq_length");
    const int64_t vocab = ctx.model.i64("vocab_size");
    san_turns_ = ctx.model.i64("san_turns");
    cycle_ = glue_cycle(tasks_, ctx.batch, max_length, ctx.model.i64("cycle_steps"),
                        ctx.model.str("task_order") == "proportional");
    // Each task's batches, padded to the cycle's lengths; batch j of a task has its own seed.
    for (std::size_t t = 0; t < tasks_.size(); ++t) {
      first_batch_.push_back(static_cast<int64_t>(batches_.size()));
      for (std::size_t j = 0; j < cycle_.lengths[t].size(); ++j) {
        batches_.emplace_back(tasks_[t], static_cast<int64_t>(t), ctx.batch, max_length, vocab,
                              ctx.device, ctx.seed + 7919 * j, cycle_.lengths[t][j]);
      }
    }
    // The batch with the most memory: the task whose epoch holds the longest example, padded to
    // it. Its length does not grow with the batch size, so peak memory is linear in the batch
    // and the search can predict it.
    std::size_t heaviest = 0;
    for (std::size_t t = 1; t < tasks_.size(); ++t) {
      if (longest_example(tasks_[t], max_length) > longest_example(tasks_[heaviest], max_length)) {
        heaviest = t;
      }
    }
    batches_.emplace_back(tasks_[heaviest], static_cast<int64_t>(heaviest), ctx.batch, max_length,
                          vocab, ctx.device, ctx.seed + 1,
                          longest_example(tasks_[heaviest], max_length));
    draw_order();
    // The opening and one whole cycle: every batch shape once; with CUDA graphs, until each
    // batch the order repeats is captured.
    warmup_steps_ =
        runtime_.warmup_steps(opening_ + static_cast<int64_t>(cycle_.steps.size()), order_);
  }

  double run() override {
    // The batch is chosen outside the iteration: each batch is its own captured variant.
    // The opening once, then its cycles over and over.
    const auto size = static_cast<int64_t>(order_.size());
    const int64_t at = next_ < size ? next_ : opening_ + (next_ - opening_) % (size - opening_);
    const int64_t index = order_[static_cast<std::size_t>(at)];
    ++next_;
    last_ = index;
    const GlueBatch& b = batches_[static_cast<std::size_t>(index)];
    return runtime_.run(index, [&] {
      updater_.zero_grad();
      torch::Tensor loss;
      {
        const auto autocast = runtime_.autocast();
        auto out = model_
                       ->forward(b.task, b.input_ids, b.token_type_ids, b.attention_mask,
                                 b.premise_mask, b.hypothesis_mask)
                       .to(torch::kFloat);
        loss = tasks_[static_cast<std::size_t>(b.task)].head == "regression"
                   ? torch::mse_loss(out, b.labels)
                   : torch::nn::functional::cross_entropy(out, b.labels);
      }
      runtime_.record_loss("loss", loss);
      runtime_.backward(updater_, loss);
      runtime_.update(updater_);
      return static_cast<double>(b.input_ids.size(0));
    });
  }

  std::map<std::string, std::vector<torch::Tensor>> parameters() const override {
    return {{"model", model_->parameters()}};
  }

  // docs/workloads/mt-dnn.md, "FLOPs": the batch this step ran, at its padded length and its
  // task's head (mtdnn_batch_macs); a step's FLOPs follow the lengths its batch drew.
  std::optional<double> step_flops() const override {
    if (last_ < 0) return std::nullopt;
    const GlueBatch& b = batches_[static_cast<std::size_t>(last_)];
    const BatchMacs macs =
        mtdnn_batch_macs(model_->bert->options, tasks_[static_cast<std::size_t>(b.task)],
                         san_turns_, b.input_ids.size(0), b.input_ids.size(1),
                         b.hypothesis_mask.size(1));
    return 2 * (3 * macs.trained + macs.forward_only);
  }

  // The draw order opens with the peak batch twice and every task once (see draw_order).
  int64_t warmup_steps() const override { return warmup_steps_; }
  bool uniform_steps() const override { return false; }
  int64_t representative_steps() const override { return representative_steps_; }
  // Eager in fp32 or tf32, nothing builds per batch shape (linear layers, and attention that
  // does not go through cuDNN); under autocast cuDNN's fused attention builds per shape (the
  // first runs took 15.1 examples/s against 143.8 in a window they entered, 2026-12-02), and
  // with CUDA graphs each batch is captured on its second run. The opening (the peak batch
  // twice, every task's first) runs once before the cycles.
  bool builds_per_shape() const override {
    return runtime_.graphs_active() || is_amp(runtime_.precision());
  }
  int64_t opening_steps() const override { return opening_; }

  Json batch_info() const override {
    Json lengths = Json::object();
    Json draws = Json::object();
    double padded = 0;
    for (std::size_t t = 0; t < tasks_.size(); ++t) {
      // As built: each batch's padded length.
      std::vector<int64_t> built;
      for (std::size_t j = 0; j < cycle_.lengths[t].size(); ++j) {
        built.push_back(batches_[static_cast<std::size_t>(first_batch_[t]) + j].length);
      }
      lengths[tasks_[t].name] = built;
      draws[tasks_[t].name] = cycle_.counts[t];
    }
    for (const auto& [t, j] : cycle_.steps) {
      padded += static_cast<double>(
          cycle_.lengths[static_cast<std::size_t>(t)][static_cast<std::size_t>(j)]);
    }
    const GlueBatch& peak = batches_.back();
    return Json{{"sequences", batches_.front().input_ids.size(0)},
                {"padded_lengths_by_task", lengths},
                {"peak_batch",
                 {{"task", tasks_[static_cast<std::size_t>(peak.task)].name},
                  {"padded_length", peak.length}}},
                {"draws_by_task", draws},
                {"mean_padded_length",
                 cycle_.steps.empty() ? 0.0 : padded / static_cast<double>(cycle_.steps.size())},
                {"representative_steps", representative_steps_}};
  }

 private:
  static MtDnn build(const StepContext& ctx, const std::vector<GlueTask>& tasks) {
    // The tasks follow from ctx.model, which the key holds.
    auto model = train::build_model<MtDnn>(
        train::reuse_key("mt-dnn", ctx.model.json().dump(), ctx.seed), ctx.device, ctx.seed, [&] {
          return MtDnn(bert_options(ctx.model), tasks, ctx.model.i64("san_turns"),
                       ctx.model.f64("san_memory_dropout"));
        });
    // The encoder's layers (models/fast_paths.h); the task heads have no vocabulary.
    set_fast_paths(*model, ctx.runtime.fast_paths, fusions(ctx.runtime));
    return model;
  }

  static train::Updater make_updater(const torch::nn::Module& model, const StepContext& ctx) {
    const Params& o = ctx.optimizer;
    train::AdamaxOptions adamax{o.f64("lr"), o.f64("beta1"), o.f64("beta2"), o.f64("eps")};
    // mt-dnn excludes bias, gamma, beta and LayerNorm from decay; ours are named *bias / *norm*.
    auto groups = train::decay_groups(model, o.f64("weight_decay"), {"bias", "norm"});
    return train::Updater(
        std::make_unique<train::Adamax>(std::move(groups), adamax), ctx.precision, ctx.device,
        o.f64("clip_norm"),
        train::warmup_linear_decay(adamax.lr, o.i64("warmup_steps"), o.i64("total_steps")));
  }

  /// The batch of every step (an index into batches_): an opening of the peak batch twice (the
  /// max-batch search's probes meet the memory peak the run will reach) and every task's first
  /// batch (warm-up sees every task), then the cycle (glue_cycle), written out a few times so
  /// that CUDA graphs capture every batch within order_; run() repeats the cycles after it.
  void draw_order() {
    const auto peak = static_cast<int64_t>(batches_.size()) - 1;  // the extra batch built last
    order_ = {peak, peak};
    for (const int64_t first : first_batch_) order_.push_back(first);
    opening_ = static_cast<int64_t>(order_.size());
    for (int repeat = 0; repeat < 4; ++repeat) {
      for (const auto& [t, j] : cycle_.steps) {
        order_.push_back(first_batch_[static_cast<std::size_t>(t)] + j);
      }
    }
    // The timed window is whole cycles: each holds the tasks' mix and every padded length.
    representative_steps_ = static_cast<int64_t>(cycle_.steps.size());
  }

  std::vector<GlueTask> tasks_;
  MtDnn model_;
  train::Updater& updater_;
  std::vector<GlueBatch> batches_;
  GlueCycle cycle_;
  std::vector<int64_t> first_batch_;  // per task: the index of its first batch in batches_
  std::vector<int64_t> order_;
  int64_t opening_ = 0;  // steps of order_ before its first cycle
  int64_t next_ = 0;
  int64_t last_ = -1;  // the batch of the last run()
  int64_t san_turns_ = 0;
  int64_t warmup_steps_ = 1;
  int64_t representative_steps_ = 1;
};

}  // namespace

Architecture mtdnn_architecture() {
  return make_architecture<MtDnnStep>(
      "mt-dnn", "MT-DNN: BERT-Large shared encoder, 8 GLUE heads (SAN on 5), tasks drawn per batch",
      mtdnn_schema(), adamax_schema(), [](const Params& model) {
        return total_parameters(MtDnn(bert_options(model), glue_tasks(model),
                                      model.i64("san_turns"), model.f64("san_memory_dropout")));
      });
}

}  // namespace gpubench::models
