// Each workload's FLOPs per step (TrainStep::step_flops(), docs/workloads/*.md "FLOPs") follow
// the batch that ran: checked on the CPU at reduced size and at two batches against an
// independent count, the multiply-adds of every convolution and matrix product the step
// executed (tests/flop_counter.h); and the record's FLOPs per unit come from them
// (FlopsPerUnit, measure/timing.h), never from the shipped constant for a changed model.
#include "gpubench/config/config.h"
#include "gpubench/measure/timing.h"
#include "gpubench/train/registry.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "flop_counter.h"

namespace gpubench {
namespace {

using testing::FlopCounter;

/// One step as counted and as its formula says.
struct CountedStep {
  double counted = 0;   ///< the FlopCounter's FLOPs
  double computed = 0;  ///< computed_step_flops(): padding included
  double useful = 0;    ///< step_flops(): what the record sums
  double units = 0;
};

/// The step of `workload` at its smoke size (with `model_patch` merged over it) and `batch` on
/// the CPU.
std::unique_ptr<TrainStep> smoke_step(const std::string& workload, int64_t batch,
                                      const Json& model_patch = Json::object()) {
  // Outlives the steps, which keep a pointer to their config.
  static const ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  const ModelConfig& config = store.model(workload);
  const Architecture& arch = builtin_registry().get(config.architecture);
  Json model = config.smoke_model.json();
  model.merge_patch(model_patch);
  StepContext ctx;
  ctx.config = &config;
  ctx.model = Params(arch.model_schema, model, Where{"step_flops_test", ""});
  ctx.optimizer = config.smoke_optimizer;
  ctx.batch = batch;
  ctx.device = torch::kCPU;
  ctx.seed = 0;
  // The plain paths: the fast paths multiply a vocabulary padded to 64 rows (the op counter
  // counts those rows), while the formulas count the model's own, padding or not.
  ctx.runtime.fast_paths = false;
  torch::manual_seed(0);
  return arch.prepare(ctx);
}

/// One run() of `step`, counted.
CountedStep count_run(TrainStep& step, const std::string& workload) {
  FlopCounter counter;
  CountedStep c;
  c.units = step.run();
  c.counted = counter.flops();
  const auto computed = step.computed_step_flops();
  const auto useful = step.step_flops();
  EXPECT_TRUE(computed.has_value() && useful.has_value()) << workload;
  c.computed = computed.value_or(0);
  c.useful = useful.value_or(0);
  return c;
}

/// `steps` steps of `workload` at its smoke size (with `model_patch` merged over it) and `batch`
/// on the CPU, each counted.
std::vector<CountedStep> count_steps(const std::string& workload, int64_t batch, int steps,
                                     const Json& model_patch = Json::object()) {
  auto step = smoke_step(workload, batch, model_patch);
  EXPECT_FALSE(step->step_flops().has_value()) << workload << ": no step has run yet";
  std::vector<CountedStep> out;
  for (int s = 0; s < steps; ++s) out.push_back(count_run(*step, workload));
  return out;
}

/// Every step's formula against its count: the formulas are exact (the tolerance is rounding).
void expect_exact(const std::string& workload, const std::vector<CountedStep>& steps,
                  int64_t batch) {
  for (std::size_t s = 0; s < steps.size(); ++s) {
    ASSERT_GT(steps[s].counted, 0) << workload;
    EXPECT_NEAR(steps[s].computed, steps[s].counted, 1e-5 * steps[s].counted)
        << workload << " batch " << batch << " step " << s;
  }
}

double per_unit(const std::vector<CountedStep>& steps, std::size_t from = 0) {
  double flops = 0, units = 0;
  for (std::size_t s = from; s < steps.size(); ++s) {
    flops += steps[s].useful;
    units += steps[s].units;
  }
  return flops / units;
}

TEST(StepFlops, TheBertFamilyMatchesItsCountedOpsAtTwoBatches) {
  for (const std::string workload : {"bert-base", "bert-base-mlm", "bert-finetune"}) {
    const auto small = count_steps(workload, 2, 1);
    const auto large = count_steps(workload, 5, 1);
    expect_exact(workload, small, 2);
    expect_exact(workload, large, 5);
    // Fixed-length sequences: padding is computed work, and the count is linear in the batch.
    EXPECT_DOUBLE_EQ(small[0].useful, small[0].computed) << workload;
    EXPECT_NEAR(per_unit(large), per_unit(small), 1e-9 * per_unit(small)) << workload;
  }
}

TEST(StepFlops, MtDnnMatchesItsCountedOpsAndPerExampleGrowsWithTheBatch) {
  // The opening (the peak batch twice, each task's first batch): every task and head, SAN and
  // linear and regression, at each batch's own padded length.
  const int steps = 10;
  const auto small = count_steps("mt-dnn", 3, steps);
  const auto large = count_steps("mt-dnn", 12, steps);
  expect_exact("mt-dnn", small, 3);
  expect_exact("mt-dnn", large, 12);
  // The tasks' batches pad to the longest of more draws at the larger batch (the peak batch of
  // the first two steps pads to the longest example at any batch): more FLOPs per example, the
  // effect one constant taken at one batch missed.
  EXPECT_GT(per_unit(large, 2), 1.05 * per_unit(small, 2));
}

TEST(StepFlops, TransformerBigMatchesItsCountedOpsPaddedAndCountsWordsWithout) {
  for (const int64_t tokens : {128, 320}) {
    const auto steps = count_steps("transformer-big", tokens, 2);  // the smoke size's 2 batches
    expect_exact("transformer-big", steps, tokens);
    for (const auto& s : steps) {
      // Useful work (each pair at its own lengths, as words/s counts) is at most the padded.
      EXPECT_GT(s.useful, 0);
      EXPECT_LE(s.useful, s.computed * (1 + 1e-12));
    }
  }
}

TEST(StepFlops, ConvSeq2SeqMatchesItsCountedOpsPaddedAndCountsWordsWithout) {
  // The smoke size's kernels 3, 3, 2, 1: odd and even encoder paddings, and the decoder's
  // causal convolutions that compute kernel - 1 steps beyond the target and trim them.
  std::vector<double> per_step;
  for (const int64_t tokens : {128, 320}) {
    const auto steps = count_steps("conv-seq2seq", tokens, 2);  // the smoke size's 2 batches
    expect_exact("conv-seq2seq", steps, tokens);
    for (const auto& s : steps) {
      EXPECT_GT(s.useful, 0);
      EXPECT_LE(s.useful, s.computed * (1 + 1e-12));
    }
    per_step.push_back(steps[0].computed + steps[1].computed);
  }
  EXPECT_GT(per_step[1], 1.5 * per_step[0]);  // the budget's batches hold more sentences
}

TEST(StepFlops, UnsupMtMatchesItsCountedOpsAtTwoTokenBudgetsAndInItsProbe) {
  std::vector<double> per_step;
  for (const int64_t tokens : {160, 400}) {
    auto step = smoke_step("unsupmt", tokens);
    EXPECT_FALSE(step->step_flops().has_value());
    // Two iterations: the same fixed batches, the same count each time; the auto-encoding
    // passes, the greedy decodes (no gradient) and the back-translation passes.
    const std::vector<CountedStep> steps = {count_run(*step, "unsupmt"),
                                            count_run(*step, "unsupmt")};
    expect_exact("unsupmt", steps, tokens);
    // Padded work is the unit's work too: XLM's words are counted where the loss predicts.
    EXPECT_DOUBLE_EQ(steps[0].useful, steps[0].computed);
    EXPECT_DOUBLE_EQ(steps[1].useful, steps[0].useful);
    per_step.push_back(steps[0].useful);
    // A search probe trains the two back-translation passes only, on stand-in translations.
    if (step->prepare_probe()) {
      const std::vector<CountedStep> probe = {count_run(*step, "unsupmt")};
      expect_exact("unsupmt probe", probe, tokens);
      EXPECT_LT(probe[0].computed, steps[0].computed);
      const std::vector<CountedStep> after = {count_run(*step, "unsupmt")};  // a whole iteration
      expect_exact("unsupmt after the probe", after, tokens);
      EXPECT_DOUBLE_EQ(after[0].computed, steps[0].computed);
    }
  }
  EXPECT_GT(per_step[1], 1.5 * per_step[0]);
}

/// FLOPs counted over one step of `workload` at `batch` (smoke size), per unit.
double counted_per_unit(const std::string& workload, int64_t batch,
                        const Json& model_patch = Json::object()) {
  auto step = smoke_step(workload, batch, model_patch);
  FlopCounter counter;
  const double units = step->run();
  EXPECT_EQ(units, static_cast<double>(batch)) << workload << ": one unit per image";
  EXPECT_GT(counter.flops(), 0) << workload;
  return counter.flops() / units;
}

TEST(StepFlops, FixedShapeImageWorkloadsCountTheSameFlopsPerImageAtTwoBatches) {
  // Their steps run fixed image shapes whatever the batch, so the counted work is linear in
  // the batch and one FLOPs-per-image constant (flops_per_unit) holds at any batch. Batches 2
  // and 4: training-mode BatchNorm on a 1 x 1 map (deeplabv3's image pooling) needs two
  // images, and 4 is stylegan's minibatch-stddev group.
  for (const std::string workload : {"nasnet-large", "deeplabv3", "deeplabv3-resnet101", "yolov3",
                                     "pix2pixhd", "stylegan"}) {
    const double two = counted_per_unit(workload, 2);
    const double four = counted_per_unit(workload, 4);
    EXPECT_NEAR(four, two, 1e-9 * two) << workload;
  }
}

TEST(StepFlops, MaskRcnnCountsFollowItsHeadsSlotsNotTheImagesAlone) {
  // The heads run on box_roi_slots and mask_roi_slots RoIs whatever the sampler found (empty
  // slots are computed too). At the smoke size both grow in step with the images (no batch-wide
  // cap binds), and so does the count: the same FLOPs per image at batches 1 and 2.
  const auto slots = [](int64_t batch, const Json& patch) {
    const Json info = smoke_step("mask-rcnn", batch, patch)->batch_info();
    return std::pair<int64_t, int64_t>{info["box_roi_slots"].get<int64_t>(),
                                       info["mask_roi_slots"].get<int64_t>()};
  };
  const auto one = slots(1, Json::object()), two = slots(2, Json::object());
  ASSERT_EQ(two.first, 2 * one.first);
  ASSERT_EQ(two.second, 2 * one.second);
  const double per_image_one = counted_per_unit("mask-rcnn", 1);
  const double per_image_two = counted_per_unit("mask-rcnn", 2);
  EXPECT_NEAR(per_image_two, per_image_one, 1e-9 * per_image_one);
  // Where the batch-wide proposal cap binds (fpn_post_nms_per_batch, as at full size at batch
  // 16: 2000 proposals for 16 x 512 sampled RoIs), the slots grow slower than the images, and
  // with them the heads' FLOPs: per image, the count falls with the batch.
  const Json capped = {{"fpn_post_nms_top_n", 40}};
  const auto capped_one = slots(1, capped), capped_two = slots(2, capped);
  ASSERT_LT(capped_two.first, 2 * capped_one.first);
  EXPECT_LT(counted_per_unit("mask-rcnn", 2, capped),
            counted_per_unit("mask-rcnn", 1, capped) * (1 - 1e-6));
}

/// One counted run of the mask-rcnn step at its smoke size (with `patch`) and `batch`, with
/// its heads' slots.
struct MaskRcnnCount {
  CountedStep step;
  int64_t box_slots = 0, mask_slots = 0;
};

MaskRcnnCount count_mask_rcnn(int64_t batch, const Json& patch) {
  auto step = smoke_step("mask-rcnn", batch, patch);
  EXPECT_FALSE(step->step_flops().has_value()) << "mask-rcnn: no step has run yet";
  MaskRcnnCount c;
  const Json info = step->batch_info();
  c.box_slots = info["box_roi_slots"].get<int64_t>();
  c.mask_slots = info["mask_roi_slots"].get<int64_t>();
  c.step = count_run(*step, "mask-rcnn");
  // Every run of a step object has the same shapes: the same FLOPs again.
  const CountedStep again = count_run(*step, "mask-rcnn");
  EXPECT_EQ(again.counted, c.step.counted);
  EXPECT_EQ(again.useful, c.step.useful);
  return c;
}

TEST(StepFlops, MaskRcnnMatchesItsCountedOpsAtTwoBatchesThroughItsHeadsSlots) {
  // Every counted op of the step has its shape fixed on the host (the images' size, the heads'
  // slots, empty ones computed too), so the formula is exact: the tolerance is rounding.
  // RoIAlign, NMS and the losses run no counted op.
  const ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  const Params& smoke = store.model("mask-rcnn").smoke_model;
  // The training FLOPs of one slot of each head, written out here apart from the formula: the
  // box head's fc6 (F x r x r -> mlp), fc7, class scores and class-specific deltas; the mask
  // head's 3x3 convs at m x m, the 2x2 stride-2 transposed conv and its own class's 1x1 logits
  // at 2m x 2m. Each with its input and weight gradients: three forwards.
  const double f = static_cast<double>(smoke.i64("fpn_channels"));
  const double r = static_cast<double>(smoke.i64("box_resolution"));
  const double mlp = static_cast<double>(smoke.i64("mlp_dim"));
  const double classes = static_cast<double>(smoke.i64("num_classes"));
  const double box_slot = 2 * 3 * (f * r * r * mlp + mlp * mlp + mlp * classes + mlp * 4 * classes);
  const double m = static_cast<double>(smoke.i64("mask_resolution"));
  double mask_macs = 0, c = f;
  for (const int64_t layer : smoke.i64s("mask_conv_layers")) {
    mask_macs += m * m * c * static_cast<double>(layer) * 9;
    c = static_cast<double>(layer);
  }
  mask_macs += m * m * c * c * 4 + 4 * m * m * c;
  const double mask_slot = 2 * 3 * mask_macs;

  struct Case {
    std::string what;
    Json patch;
    int64_t small, large;
    bool capped;  ///< the slots grow slower than the images between the two batches
  };
  const std::vector<Case> cases = {
      // As shipped at smoke size: at batch 3 the batch-wide cap of 150 proposals
      // (fpn_post_nms_top_n over the batch) binds on the box slots: 3 x 3 boxes + 150, not
      // 3 x 64 (as 2000 proposals bind at full size from batch 4 on).
      {"smoke size", Json::object(), 1, 3, true},
      // A tighter cap binds at both batches.
      {"fpn_post_nms_top_n 40", Json{{"fpn_post_nms_top_n", 40}}, 2, 3, true},
      // Every image its most RoIs: the slots grow with the images. The stem trained too (its
      // input, the images, needs no gradient: its weight gradient only) and the strides in the
      // 3x3 convs.
      {"fixed_max, freeze_at 0, stride in the 3x3",
       Json{{"roi_heads", "fixed_max"}, {"freeze_at", 0}, {"stride_in_1x1", false}}, 1, 2, false},
      // res2 and res3 frozen: res4's first block and the C2, C3 laterals read outputs that need
      // no gradient (weight gradients only).
      {"freeze_at 3", Json{{"freeze_at", 3}}, 1, 2, false},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    const MaskRcnnCount small = count_mask_rcnn(k.small, k.patch);
    const MaskRcnnCount large = count_mask_rcnn(k.large, k.patch);
    expect_exact("mask-rcnn", {small.step}, k.small);
    expect_exact("mask-rcnn", {large.step}, k.large);
    // The device computes every slot: the record sums the computed work.
    EXPECT_EQ(small.step.useful, small.step.computed);
    EXPECT_EQ(large.step.units, static_cast<double>(k.large));
    // The backbone, FPN and RPN are linear in the images; what departs from linear is the
    // heads' slots, at their cost per slot.
    const double ratio = static_cast<double>(k.large) / static_cast<double>(k.small);
    const double beyond_linear = large.step.counted - ratio * small.step.counted;
    const double slots_beyond_linear =
        box_slot * (static_cast<double>(large.box_slots) - ratio * small.box_slots) +
        mask_slot * (static_cast<double>(large.mask_slots) - ratio * small.mask_slots);
    EXPECT_NEAR(beyond_linear, slots_beyond_linear, 1e-6 * large.step.counted);
    // And so the record's FLOPs per image: lower at the larger batch where the cap binds, the
    // same where the slots grow with the images.
    const double per_image_small = small.step.useful / small.step.units;
    const double per_image_large = large.step.useful / large.step.units;
    if (k.capped) {
      EXPECT_LT(large.box_slots * k.small, small.box_slots * k.large);
      EXPECT_LT(per_image_large, per_image_small * (1 - 1e-6));
    } else {
      EXPECT_EQ(large.box_slots * k.small, small.box_slots * k.large);
      EXPECT_NEAR(per_image_large, per_image_small, 1e-9 * per_image_small);
    }
  }
}

TEST(StepFlops, AModelChangedByAConfigGetsItsFlopsFromItsShapes) {
  // A deeper, wider encoder than the smoke size: the formula follows the model built.
  const Json patch = {{"layers", 3}, {"intermediate_size", 96}};
  const auto changed = count_steps("bert-base", 2, 1, patch);
  expect_exact("bert-base", changed, 2);
  const auto smoke = count_steps("bert-base", 2, 1);
  EXPECT_GT(changed[0].useful, smoke[0].useful);
}

TEST(StepFlops, TheRecordTakesTheWindowsFlopsElseTheConstantOfAShippedModelOnly) {
  // The window's sum over its steps, per unit and per step.
  const FlopsPerUnit window = FlopsPerUnit::of_window(6e12, 300, 4);
  ASSERT_TRUE(window.value.has_value());
  EXPECT_DOUBLE_EQ(*window.value, 2e10);
  EXPECT_EQ(window.source, "step shapes");
  EXPECT_DOUBLE_EQ(*window.per_step, 1.5e12);
  // It wins over the config's constant, changed model or not.
  EXPECT_DOUBLE_EQ(*window.or_config(1.16e11, false).value, 2e10);
  EXPECT_EQ(window.or_config(1.16e11, true).source, "step shapes");
  // A step without a formula: the constant for a model as shipped, none for a changed one.
  const FlopsPerUnit none = FlopsPerUnit::of_window(std::nullopt, 300, 4);
  EXPECT_FALSE(none.value.has_value());
  const FlopsPerUnit shipped = none.or_config(1.16e11, false);
  EXPECT_DOUBLE_EQ(*shipped.value, 1.16e11);
  EXPECT_EQ(shipped.source, "config");
  EXPECT_FALSE(shipped.per_step.has_value());
  EXPECT_FALSE(none.or_config(1.16e11, true).value.has_value());
  EXPECT_TRUE(none.or_config(1.16e11, true).to_compute().empty());
  // Through the record's compute, as written and read, and back (the repeats recompute from
  // it).
  const ComputeRecord compute = window.to_compute();
  EXPECT_DOUBLE_EQ(compute.flops_per_unit.value_or(0), 2e10);
  EXPECT_EQ(compute.flops_source, std::optional<std::string>("step shapes"));
  const FlopsPerUnit back =
      FlopsPerUnit::from_compute(ComputeRecord::from_json(compute.to_json(), "compute"));
  EXPECT_DOUBLE_EQ(*back.value, 2e10);
  EXPECT_EQ(back.source, "step shapes");
  EXPECT_DOUBLE_EQ(*back.per_step, 1.5e12);
}

TEST(StepFlops, AChangedModelNeverTakesTheShippedConstant) {
  // Every shipped workload states a constant (the documented figure, and the record's FLOPs
  // for a step without a formula of its own), which a changed model never gets.
  const ConfigStore store = ConfigStore::load_builtin(builtin_registry());
  for (const std::string& name : store.model_names()) {
    const ModelConfig& config = store.model(name);
    EXPECT_TRUE(config.flops_per_unit.has_value()) << name;
    EXPECT_FALSE(FlopsPerUnit{}.or_config(config.flops_per_unit, true).value.has_value()) << name;
  }
}

}  // namespace
}  // namespace gpubench
