// The detection operators on hand-made cases with known answers, and against direct host ports
// of maskrcnn-benchmark's kernels (greedy NMS, legacy RoIAlign) on random inputs.
#include "models/detection_ops.h"

#include "gpubench/base/compat.h"
#include "gpubench/device/device.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

namespace gpubench::models::detection {
namespace {

torch::Tensor boxes_of(const std::vector<std::vector<float>>& rows) {
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return torch::tensor(flat).view({static_cast<int64_t>(rows.size()), 4});
}

torch::Tensor longs(std::vector<int64_t> values) { return torch::tensor(values); }

std::vector<bool> to_bools(const torch::Tensor& t) {
  std::vector<bool> out;
  const auto c = t.to(torch::kBool).contiguous();
  for (int64_t i = 0; i < c.numel(); ++i) out.push_back(c.view(-1)[i].item<bool>());
  return out;
}

// ---- IoU and box coder ----

TEST(DetectionOpsTest, BoxIouUsesLegacyInclusiveAreas) {
  const auto a = boxes_of({{0, 0, 9, 9}});
  const auto b = boxes_of({{5, 0, 14, 9}, {0, 0, 9, 9}, {20, 20, 29, 29}, {0, 0, 4, 4}});
  const auto iou = box_iou(a, b);
  ASSERT_EQ(iou.sizes(), (std::vector<int64_t>{1, 4}));
  EXPECT_NEAR(iou[0][0].item<float>(), 50.0 / 150.0, 1e-6);  // 5 x 10 shared of 10 x 10 each
  EXPECT_NEAR(iou[0][1].item<float>(), 1.0, 1e-6);
  EXPECT_NEAR(iou[0][2].item<float>(), 0.0, 1e-6);
  EXPECT_NEAR(iou[0][3].item<float>(), 25.0 / 100.0, 1e-6);
  // Leading dimensions broadcast: [2, 1, 4] against [4, 4] -> [2, 1, 4].
  EXPECT_EQ(box_iou(torch::stack({a, a}), b).sizes(), (std::vector<int64_t>{2, 1, 4}));
}

TEST(DetectionOpsTest, BoxCoderEncodesAndDecodesLegacyDeltas) {
  const BoxCoder coder({10, 10, 5, 5});
  const auto reference = boxes_of({{0, 0, 9, 9}});  // width 10, centre 5
  const auto target = boxes_of({{2, 0, 11, 19}});   // centre (7, 10), 10 x 20
  const auto d = coder.encode(target, reference);
  EXPECT_NEAR(d[0][0].item<float>(), 10 * 2.0 / 10, 1e-5);
  EXPECT_NEAR(d[0][1].item<float>(), 10 * 5.0 / 10, 1e-5);
  EXPECT_NEAR(d[0][2].item<float>(), 0.0, 1e-5);
  EXPECT_NEAR(d[0][3].item<float>(), 5 * std::log(2.0), 1e-5);
  EXPECT_TRUE(torch::allclose(coder.decode(d, reference), target, 1e-4, 1e-4));
  // dw and dh are clamped at log(1000 / 16) before exp.
  const auto huge = torch::tensor({0.f, 0.f, 100.f, 0.f}).view({1, 4});
  const auto wide = BoxCoder({1, 1, 1, 1}).decode(huge, reference);
  EXPECT_NEAR((wide[0][2] - wide[0][0] + 1).item<float>(), 10 * 1000.0 / 16, 1e-2);
}

TEST(DetectionOpsTest, SmoothL1HasMaskrcnnBenchmarksBeta) {
  const auto x = torch::tensor({0.05f, -1.0f, 0.0f});
  const auto l = smooth_l1(x, torch::zeros(3), 1.0 / 9);
  EXPECT_NEAR(l[0].item<float>(), 0.5 * 0.05 * 0.05 * 9, 1e-6);
  EXPECT_NEAR(l[1].item<float>(), 1.0 - 0.5 / 9, 1e-6);
  EXPECT_NEAR(l[2].item<float>(), 0.0, 1e-7);
}

// ---- Anchors ----

TEST(DetectionOpsTest, CellAnchorsAreDetectrons) {
  // stride 16, size 32: ratios round to 23x12, 16x16, 11x22 base boxes, scaled x2, centred
  // at 7.5.
  const auto a16 = cell_anchors(16, 32, {0.5, 1, 2});
  EXPECT_TRUE(
      torch::equal(a16, boxes_of({{-15, -4, 30, 19}, {-8, -8, 23, 23}, {-3, -14, 18, 29}})));
  // stride 4, size 32: 6x3, 4x4, 3x6 scaled x8, centred at 1.5.
  const auto a4 = cell_anchors(4, 32, {0.5, 1, 2});
  EXPECT_TRUE(
      torch::equal(a4, boxes_of({{-22, -10, 25, 13}, {-14, -14, 17, 17}, {-10, -22, 13, 25}})));
}

TEST(DetectionOpsTest, GridAnchorsAreOrderedRowColumnAnchor) {
  const auto cell = cell_anchors(8, 16, {0.5, 1, 2});
  const auto grid = grid_anchors(cell, 8, 2, 3);
  ASSERT_EQ(grid.sizes(), (std::vector<int64_t>{2 * 3 * 3, 4}));
  EXPECT_TRUE(torch::equal(grid.narrow(0, 0, 3), cell));  // (y 0, x 0)
  const auto shift_x = torch::tensor({8.f, 0.f, 8.f, 0.f});
  const auto shift_y = torch::tensor({0.f, 8.f, 0.f, 8.f});
  EXPECT_TRUE(torch::equal(grid.narrow(0, 3, 3), cell + shift_x));                 // (0, 1)
  EXPECT_TRUE(torch::equal(grid.narrow(0, 9, 3), cell + shift_y));                 // (1, 0)
  EXPECT_TRUE(torch::equal(grid.narrow(0, 15, 3), cell + shift_y + 2 * shift_x));  // (1, 2)
}

TEST(DetectionOpsTest, AnchorsCrossingTheBorderAreNotVisible) {
  const auto anchors =
      boxes_of({{0, 0, 10, 10}, {-1, 0, 10, 10}, {5, 5, 99, 49}, {5, 5, 100, 49}, {5, 5, 50, 50}});
  EXPECT_EQ(to_bools(visible_anchors(anchors, 50, 100, 0)),
            (std::vector<bool>{true, false, true, false, false}));
  EXPECT_EQ(to_bools(visible_anchors(anchors, 50, 100, 1)),
            (std::vector<bool>{true, true, true, true, true}));
}

// ---- Matcher and sampler ----

TEST(DetectionOpsTest, MatcherAssignsThresholdCodesAndLowQualityMatches) {
  const auto quality = torch::tensor({0.9f, 0.5f, 0.25f, 0.2f, 0.65f,  //
                                      0.1f, 0.6f, 0.2f, 0.1f, 0.6f})
                           .view({2, 5});
  const Matcher strict{0.7, 0.3, false};
  EXPECT_TRUE(torch::equal(strict(quality), longs({0, kBetweenThresholds, kBelowLowThreshold,
                                                   kBelowLowThreshold, kBetweenThresholds})));
  // Ground truth 1's best IoU is 0.6, reached by predictions 1 and 4: both keep their own best
  // match (4's is ground truth 0 at 0.65), as set_low_quality_matches_ does.
  const Matcher low_quality{0.7, 0.3, true};
  EXPECT_TRUE(
      torch::equal(low_quality(quality), longs({0, 1, kBelowLowThreshold, kBelowLowThreshold, 0})));
  // Batched: [N, G, P] -> [N, P].
  EXPECT_TRUE(torch::equal(low_quality(torch::stack({quality, quality})),
                           low_quality(quality).unsqueeze(0).expand({2, 5})));
  // Equal thresholds (the RoI matcher) leave nothing between.
  EXPECT_TRUE(torch::equal(Matcher{0.5, 0.5, false}(quality),
                           longs({0, 1, kBelowLowThreshold, kBelowLowThreshold, 0})));
}

TEST(DetectionOpsTest, BalancedSamplerDrawsTheReferenceCounts) {
  torch::manual_seed(0);
  const int64_t c = 20;
  auto positive = torch::zeros({3, c}, torch::kBool), negative = torch::zeros({3, c}, torch::kBool);
  positive[0].narrow(0, 0, 10).fill_(true);  // 10 positives, 10 negatives
  negative[0].narrow(0, 10, 10).fill_(true);
  positive[1][3] = true;  // 1 positive, 15 negatives, 4 ignored
  negative[1].narrow(0, 5, 15).fill_(true);
  negative[2].narrow(0, 0, 3).fill_(true);  // 3 negatives only
  std::set<int64_t> seen_positive;
  for (int draw = 0; draw < 20; ++draw) {
    const auto s = balanced_sample(positive, negative, 8, 0.5);
    ASSERT_EQ(s.positive_index.sizes(), (std::vector<int64_t>{3, 4}));
    ASSERT_EQ(s.index.sizes(), (std::vector<int64_t>{3, 8}));
    const std::vector<int64_t> expect_pos{4, 1, 0}, expect_all{8, 8, 3};
    for (int64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(s.positive_valid[i].sum().item<int64_t>(), expect_pos[i]);
      EXPECT_EQ(s.positive[i].sum().item<int64_t>(), expect_pos[i]);
      EXPECT_EQ(s.valid[i].sum().item<int64_t>(), expect_all[i]);
      std::set<int64_t> distinct;
      for (int64_t j = 0; j < 8; ++j) {
        if (!s.valid[i][j].item<bool>()) {
          // Padding only after every valid entry.
          EXPECT_FALSE(s.valid[i].narrow(0, j, 8 - j).any().item<bool>());
          break;
        }
        const int64_t k = s.index[i][j].item<int64_t>();
        distinct.insert(k);
        // Positives come first, and every entry is of the category it claims.
        EXPECT_EQ(s.positive[i][j].item<bool>(), j < expect_pos[i]);
        EXPECT_TRUE((s.positive[i][j].item<bool>() ? positive : negative)[i][k].item<bool>());
        if (i == 0 && s.positive[i][j].item<bool>()) seen_positive.insert(k);
      }
      EXPECT_EQ(static_cast<int64_t>(distinct.size()), expect_all[i]);
    }
  }
  // 4 of 10 positives per draw, at random: 20 draws reach all of them.
  EXPECT_EQ(seen_positive.size(), 10u);
}

// ---- NMS ----

TEST(DetectionOpsTest, NmsSuppressesGreedilyInScoreOrder) {
  // Sorted by score. B overlaps A (IoU 0.82) and goes; C overlaps B (0.82) but not A (0.67):
  // greedy NMS keeps C because B is gone (a one-shot "any higher box overlaps" rule would not).
  // D is far away; E overlaps D only at 1/3.
  const auto boxes =
      boxes_of({{0, 0, 9, 9}, {1, 0, 10, 9}, {2, 0, 11, 9}, {50, 50, 59, 59}, {55, 50, 64, 59}});
  const auto keep = batched_nms(boxes.unsqueeze(0), torch::ones({1, 5}, torch::kBool), 0.7);
  EXPECT_EQ(to_bools(keep), (std::vector<bool>{true, false, true, true, true}));
  // At 0.6, C goes too (IoU with A 0.67) and E stays.
  EXPECT_EQ(to_bools(batched_nms(boxes.unsqueeze(0), torch::ones({1, 5}, torch::kBool), 0.6)),
            (std::vector<bool>{true, false, false, true, true}));
}

TEST(DetectionOpsTest, NmsIgnoresInvalidBoxesAndKeepsGroupsApart) {
  const auto boxes = boxes_of({{0, 0, 9, 9}, {1, 0, 10, 9}, {2, 0, 11, 9}});
  // Group 0: the best box is padding, so the second is kept and removes the third (IoU 0.82).
  // Group 1: the same boxes, all valid: A keeps, B goes, C stays.
  const auto valid = torch::tensor({false, true, true, true, true, true}).view({2, 3});
  const auto keep = batched_nms(torch::stack({boxes, boxes}), valid, 0.7);
  EXPECT_EQ(to_bools(keep), (std::vector<bool>{false, true, false, true, false, true}));
}

/// maskrcnn-benchmark's nms on the host: IoU with +1 areas (float operations in box_iou's
/// order, so ties at the threshold round alike), a kept box removes later ones above it.
std::vector<bool> greedy_nms(const std::vector<std::array<float, 4>>& b,
                             const std::vector<bool>& valid, float threshold) {
  const std::size_t n = b.size();
  const auto area = [&](std::size_t i) {
    return (b[i][2] + 1 - b[i][0]) * (b[i][3] + 1 - b[i][1]);
  };
  std::vector<bool> removed(n, false), keep(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    if (!valid[i] || removed[i]) continue;
    keep[i] = true;
    for (std::size_t k = i + 1; k < n; ++k) {
      const float w =
          std::max(0.f, std::min(b[i][2] + 1, b[k][2] + 1) - std::max(b[i][0], b[k][0]));
      const float h =
          std::max(0.f, std::min(b[i][3] + 1, b[k][3] + 1) - std::max(b[i][1], b[k][1]));
      const float inter = w * h;
      if (inter / (area(i) + area(k) - inter) > threshold) removed[k] = true;
    }
  }
  return keep;
}

TEST(DetectionOpsTest, NmsMatchesAHostGreedyScanOnRandomBoxes) {
  torch::manual_seed(1);
  const int64_t groups = 4, n = 300;
  // Clustered boxes, so long suppression chains occur.
  const auto centre = torch::rand({groups, n, 2}) * 60;
  const auto size = torch::rand({groups, n, 2}) * 30 + 5;
  const auto boxes = torch::cat({centre - size / 2, centre + size / 2}, -1);
  const auto valid = torch::rand({groups, n}).gt(0.1);
  // One BatchedNms for several calls: its kept buffers must not leak from one to the next.
  BatchedNms nms;
  nms(boxes.narrow(0, 0, 2).flip({1}), valid.narrow(0, 0, 2), 0.5);  // another shape first
  nms(boxes.flip({1}), valid, 0.5);
  const auto keep = nms(boxes, valid, 0.7);
  for (int64_t g = 0; g < groups; ++g) {
    std::vector<std::array<float, 4>> b(n);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < 4; ++k) b[i][k] = boxes[g][i][k].item<float>();
    }
    EXPECT_EQ(to_bools(keep[g]), greedy_nms(b, to_bools(valid[g]), 0.7f)) << "group " << g;
  }
  // Not a vacuous case: suppression happened, and a one-shot rule (drop every box that a
  // higher valid box overlaps) would have dropped boxes that greedy NMS keeps.
  const auto suppress = box_iou(boxes, boxes).gt(0.7).triu(1) & valid.unsqueeze(-1);
  const auto one_shot = valid & suppress.any(1).logical_not();
  EXPECT_LT(keep.sum().item<int64_t>(), valid.sum().item<int64_t>());
  EXPECT_LT(one_shot.sum().item<int64_t>(), keep.sum().item<int64_t>());
}

// ---- Levels and RoIAlign ----

TEST(DetectionOpsTest, RoiLevelsFollowTheLevelMapper) {
  // sqrt(legacy area) 50, 112, 224, 448, 1000 -> floor(4 + log2(s / 224)) clamped to 2..5.
  const auto boxes = boxes_of({{0, 0, 49, 49},
                               {0, 0, 111, 111},
                               {0, 0, 223, 223},
                               {0, 0, 447, 447},
                               {0, 0, 999, 999},
                               {0, 0, 110, 110}});
  EXPECT_TRUE(torch::equal(roi_levels(boxes, 2, 5), longs({0, 1, 2, 3, 3, 0})));
  const auto nan_box = torch::full({1, 4}, std::nanf(""));
  EXPECT_EQ(roi_levels(nan_box, 2, 5).item<int64_t>(), 0);
}

/// A ramp f(y, x) = x + 10 y: bilinear interpolation reproduces it exactly.
torch::Tensor ramp(int64_t height, int64_t width) {
  const auto y = torch::arange(height, torch::kFloat).view({height, 1});
  const auto x = torch::arange(width, torch::kFloat).view({1, width});
  return (x + 10 * y).view({1, 1, height, width});
}

TEST(DetectionOpsTest, RoiAlignOnARampMatchesHandComputedBilinearValues) {
  const auto f = ramp(8, 8);
  // Inside: each 2x2 bin of RoI (1, 1)-(5, 5) averages samples symmetric about its centre.
  const auto inside = roi_align(f, boxes_of({{1, 1, 5, 5}}).unsqueeze(0), 1.0, 2, 2);
  EXPECT_TRUE(torch::allclose(inside, torch::tensor({22.f, 24.f, 42.f, 44.f}).view({1, 1, 2, 2}),
                              1e-4, 1e-4));
  // Across the right border (width 8): x samples 4.75, 6.25 | 7.75 (within a pixel: read at
  // the border x = 7), 9.25 (beyond: 0); y samples 0.25, 0.75 | 1.25, 1.75.
  const auto border = roi_align(f, boxes_of({{4, 0, 10, 2}}).unsqueeze(0), 1.0, 2, 2);
  EXPECT_TRUE(torch::allclose(border, torch::tensor({10.5f, 6.f, 20.5f, 11.f}).view({1, 1, 2, 2}),
                              1e-4, 1e-4));
  // At half scale the same RoI in a 16 x 16 image reads the 8 x 8 map at half coordinates.
  const auto scaled = roi_align(f, boxes_of({{2, 2, 10, 10}}).unsqueeze(0), 0.5, 2, 2);
  EXPECT_TRUE(torch::allclose(scaled, inside, 1e-4, 1e-4));
  // Degenerate RoIs are forced to 1 x 1: a point RoI at (3, 2) in one bin averages samples
  // over [3, 4] x [2, 3], centred at (3.5, 2.5).
  const auto point = roi_align(f, boxes_of({{3, 2, 3, 2}}).unsqueeze(0), 1.0, 1, 2);
  EXPECT_NEAR(point.item<float>(), 3.5 + 25, 1e-4);
}

/// A host port of maskrcnn-benchmark's ROIAlign_forward (legacy, aligned=False) for one RoI.
std::vector<float> reference_roi_align(const torch::Tensor& map, const std::array<float, 4>& roi,
                                       float scale, int64_t out, int64_t ratio) {
  const int64_t channels = map.size(0), height = map.size(1), width = map.size(2);
  const auto a = map.accessor<float, 3>();
  const float x1 = roi[0] * scale, y1 = roi[1] * scale;
  const float rw = std::max(roi[2] * scale - x1, 1.f), rh = std::max(roi[3] * scale - y1, 1.f);
  const float bw = rw / out, bh = rh / out;
  std::vector<float> result;
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t ph = 0; ph < out; ++ph) {
      for (int64_t pw = 0; pw < out; ++pw) {
        float sum = 0;
        for (int64_t iy = 0; iy < ratio; ++iy) {
          for (int64_t ix = 0; ix < ratio; ++ix) {
            float y = y1 + ph * bh + (iy + 0.5f) * bh / ratio;
            float x = x1 + pw * bw + (ix + 0.5f) * bw / ratio;
            if (y < -1 || y > height || x < -1 || x > width) continue;
            y = std::max(y, 0.f);
            x = std::max(x, 0.f);
            int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x), y_1, x_1;
            if (y0 >= height - 1) {
              y_1 = y0 = height - 1;
              y = static_cast<float>(y0);
            } else {
              y_1 = y0 + 1;
            }
            if (x0 >= width - 1) {
              x_1 = x0 = width - 1;
              x = static_cast<float>(x0);
            } else {
              x_1 = x0 + 1;
            }
            const float ly = y - y0, lx = x - x0;
            sum += (1 - ly) * (1 - lx) * a[c][y0][x0] + (1 - ly) * lx * a[c][y0][x_1] +
                   ly * (1 - lx) * a[c][y_1][x0] + ly * lx * a[c][y_1][x_1];
          }
        }
        result.push_back(sum / static_cast<float>(ratio * ratio));
      }
    }
  }
  return result;
}

/// `count` random RoIs per image of a 64 x 96 image, some partly or wholly outside, some
/// degenerate: [images * count, 4], their images and levels (of `levels`).
struct RandomRois {
  torch::Tensor rois, image, level;
};
RandomRois random_rois(int64_t images, int64_t count, int64_t levels) {
  const auto corner = torch::rand({images * count, 2}) * torch::tensor({130.f, 90.f}) - 20;
  const auto extent = torch::rand({images * count, 2}) * 60;
  return {torch::cat({corner, corner + extent}, -1),
          torch::arange(images, torch::kLong).repeat_interleave(count),
          torch::randint(0, levels, {images * count}, torch::kLong)};
}

TEST(DetectionOpsTest, MultiLevelRoiAlignMatchesTheReferenceKernel) {
  torch::manual_seed(2);
  // Two images, three levels of a 64 x 96 image at scales 1/4, 1/8, 1/16.
  const std::vector<std::pair<int64_t, int64_t>> sizes{{16, 24}, {8, 12}, {4, 6}};
  const std::vector<double> scales{0.25, 0.125, 0.0625};
  std::vector<torch::Tensor> levels;
  for (const auto& [h, w] : sizes) levels.push_back(torch::randn({2, 3, h, w}));
  const FeatureRows layout(sizes, scales, torch::kCPU);
  const auto rows = layout.pack(levels);
  ASSERT_EQ(rows.sizes(), (std::vector<int64_t>{2 * (16 * 24 + 8 * 12 + 4 * 6), 3}));
  const int64_t count = 40;
  const auto r = random_rois(2, count, 3);
  const auto out = roi_align(rows, layout, r.rois, r.image, r.level, 3, 2);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{2 * count, 3, 3, 3}));
  for (int64_t i = 0; i < 2 * count; ++i) {
    const int64_t n = r.image[i].item<int64_t>(), l = r.level[i].item<int64_t>();
    std::array<float, 4> roi{};
    for (int64_t k = 0; k < 4; ++k) roi[k] = r.rois[i][k].item<float>();
    const auto expected =
        reference_roi_align(levels[l][n], roi, static_cast<float>(scales[l]), 3, 2);
    const auto got = out[i].contiguous().view(-1);
    for (std::size_t v = 0; v < expected.size(); ++v) {
      ASSERT_NEAR(got[static_cast<int64_t>(v)].item<float>(), expected[v], 1e-4)
          << "roi " << i << " image " << n << " level " << l << " value " << v;
    }
  }
}

/// The RoIAlign gpubench used before the row table: grid_sample (bilinear, align_corners) of a
/// float map at the samples' pixel coordinates, samples outside sent off the map, then the mean
/// of each bin's samples. One level, RoIs [N, R, 4] of image n on image n.
torch::Tensor grid_sample_roi_align(const torch::Tensor& features, const torch::Tensor& rois,
                                    double scale, int64_t out, int64_t ratio) {
  namespace F = torch::nn::functional;
  const int64_t images = rois.size(0), count = rois.size(1), channels = features.size(1);
  const double height = static_cast<double>(features.size(2));
  const double width = static_cast<double>(features.size(3));
  const int64_t samples = out * ratio;
  const auto x1 = rois.select(-1, 0) * scale, y1 = rois.select(-1, 1) * scale;
  const auto bin_w = (rois.select(-1, 2) * scale - x1).clamp_min(1) / static_cast<double>(out);
  const auto bin_h = (rois.select(-1, 3) * scale - y1).clamp_min(1) / static_cast<double>(out);
  const auto offset = (torch::arange(samples, torch::kFloat) + 0.5) / static_cast<double>(ratio);
  const auto xs = x1.unsqueeze(-1) + offset * bin_w.unsqueeze(-1);
  const auto ys = y1.unsqueeze(-1) + offset * bin_h.unsqueeze(-1);
  const auto gx = xs.clamp(0, width - 1) * (2 / (width - 1)) - 1;
  const auto gy = ys.clamp(0, height - 1) * (2 / (height - 1)) - 1;
  const auto outside =
      ((ys.ge(-1) & ys.le(height)).unsqueeze(-1) & (xs.ge(-1) & xs.le(width)).unsqueeze(-2))
          .logical_not();
  const std::vector<int64_t> square{images, count, samples, samples};
  const auto grid = torch::stack({gx.unsqueeze(-2).expand(square).masked_fill(outside, -4.0),
                                  gy.unsqueeze(-1).expand(square).masked_fill(outside, -4.0)},
                                 -1)
                        .view({images, count * samples, samples, 2});
  const auto sampled = F::grid_sample(features.to(torch::kFloat), grid,
                                      F::GridSampleFuncOptions()
                                          .mode(torch::kBilinear)
                                          .padding_mode(torch::kZeros)
                                          .align_corners(true));
  return sampled.view({images, channels, count * out, ratio, out, ratio})
      .mean({3, 5})
      .view({images, channels, count, out, out})
      .permute({0, 2, 1, 3, 4})
      .reshape({images * count, channels, out, out});
}

TEST(DetectionOpsTest, RoiAlignMatchesTheGridSampleVersionInFloatAndBf16) {
  torch::manual_seed(5);
  const auto map = torch::randn({2, 8, 16, 24});
  const auto rois = torch::cat(
      {torch::rand({2, 30, 2}) * torch::tensor({100.f, 70.f}) - 10, torch::rand({2, 30, 2}) * 40},
      -1);
  const auto boxes =
      torch::cat({rois.narrow(-1, 0, 2), rois.narrow(-1, 0, 2) + rois.narrow(-1, 2, 2)}, -1);
  const auto head = torch::randn({60, 8, 4, 4});  // a fixed upstream gradient
  // Old (grid_sample, float) and new (row table) on the float map: values and the map's gradient.
  const auto old_map = map.clone().requires_grad_();
  const auto old_out = grid_sample_roi_align(old_map, boxes, 0.25, 4, 2);
  (old_out * head).sum().backward();
  const auto new_map = map.clone().requires_grad_();
  const auto new_out = roi_align(new_map, boxes, 0.25, 4, 2);
  (new_out * head).sum().backward();
  EXPECT_TRUE(torch::allclose(new_out, old_out, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(new_map.grad(), old_map.grad(), 1e-5, 1e-5));
  // The bf16 map: sampled in bf16 (where libtorch has the kernel), within bf16 rounding of the
  // float result, and its gradient comes back in bf16.
  const auto bf16_map = map.to(torch::kBFloat16).requires_grad_();
  const FeatureRows layout({{16, 24}}, {0.25}, torch::kCPU);
  const auto rows = layout.pack({bf16_map});
  EXPECT_EQ(rows.scalar_type(), compat::embedding_bag_dtype(torch::kBFloat16, torch::kCPU));
  if (compat::kCpuBf16EmbeddingBag) {
    EXPECT_EQ(rows.scalar_type(), torch::kBFloat16);
  }
  const auto bf16_out = roi_align(bf16_map, boxes, 0.25, 4, 2);
  EXPECT_EQ(bf16_out.scalar_type(), rows.scalar_type());
  (bf16_out.to(torch::kFloat) * head).sum().backward();
  ASSERT_TRUE(bf16_map.grad().defined());
  EXPECT_EQ(bf16_map.grad().scalar_type(), torch::kBFloat16);
  const double scale = old_out.abs().max().item<double>();
  EXPECT_LT((bf16_out.to(torch::kFloat) - old_out).abs().max().item<double>(), 2e-2 * scale);
  const double grad_scale = old_map.grad().abs().max().item<double>();
  EXPECT_LT((bf16_map.grad().to(torch::kFloat) - old_map.grad()).abs().max().item<double>(),
            2e-2 * grad_scale);
}

TEST(DetectionOpsTest, FeatureRowsHoldEachPixelOnceAndRouteGradientsToTheirLevel) {
  const FeatureRows layout({{8, 12}, {4, 6}, {2, 3}}, {1, 0.5, 0.25}, torch::kCPU);
  EXPECT_EQ(layout.pixels_per_image(), 96 + 24 + 6);
  // Pixel (n, c, y, x) of level l holds 1000 l + 100 n + 10 c + ... : each row is one pixel.
  std::vector<torch::Tensor> levels;
  for (int64_t l = 0; l < 3; ++l) {
    const auto [h, w] = layout.sizes()[l];
    const auto n = torch::arange(2, torch::kFloat).view({2, 1, 1, 1});
    const auto c = torch::arange(3, torch::kFloat).view({1, 3, 1, 1});
    const auto p = torch::arange(h * w, torch::kFloat).view({1, 1, h, w});
    levels.push_back((1000 * l + 100 * n + 10 * c + p / 1000).contiguous());
  }
  const auto rows = layout.pack(levels);
  ASSERT_EQ(rows.sizes(), (std::vector<int64_t>{2 * 126, 3}));
  // Level 1 starts after both images' level 0; image 1 of it after image 0's 24 pixels; pixel
  // (y 2, x 5) is row 2 * 6 + 5 of it.
  const auto row = rows[2 * 96 + 24 + 2 * 6 + 5];
  EXPECT_TRUE(torch::allclose(row, torch::tensor({1100.f, 1110.f, 1120.f}) + 17.f / 1000));
  // The gradient of a RoIAlign reaches only the level and image it read.
  std::vector<torch::Tensor> ones{torch::ones({2, 1, 8, 12}, torch::requires_grad()),
                                  torch::ones({2, 1, 4, 6}, torch::requires_grad()),
                                  torch::ones({2, 1, 2, 3}, torch::requires_grad())};
  const auto rois = boxes_of({{0, 0, 8, 8}});  // (0, 0)-(4, 4) on level 1
  roi_align(layout.pack(ones), layout, rois, longs({1}), longs({1}), 2, 2).sum().backward();
  EXPECT_EQ(ones[0].grad().abs().sum().item<float>(), 0);
  EXPECT_EQ(ones[1].grad()[0].abs().sum().item<float>(), 0);
  EXPECT_NEAR(ones[1].grad()[1].sum().item<float>(), 4.0, 1e-5);  // four bins of mean weight 1
  EXPECT_EQ(ones[2].grad().abs().sum().item<float>(), 0);
}

TEST(DetectionOpsTest, PackSlotsListsTheKeptEntriesImageAfterImage) {
  const auto keep = torch::tensor(std::vector<int64_t>{1, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0, 1})
                        .to(torch::kBool)
                        .view({3, 4});
  const auto [source, valid] = pack_slots(keep, 8);
  EXPECT_TRUE(torch::equal(source.narrow(0, 0, 6), longs({0, 2, 7, 8, 9, 11})));
  EXPECT_EQ(to_bools(valid), (std::vector<bool>{true, true, true, true, true, true, false, false}));
  // Exactly enough slots, and none kept.
  const auto [tight, tight_valid] = pack_slots(keep, 6);
  EXPECT_TRUE(torch::equal(tight, longs({0, 2, 7, 8, 9, 11})));
  EXPECT_TRUE(tight_valid.all().item<bool>());
  const auto [empty, empty_valid] = pack_slots(torch::zeros({2, 3}, torch::kBool), 4);
  EXPECT_FALSE(empty_valid.any().item<bool>());
}

TEST(DetectionOpsTest, RoiAlignKeepsBf16MapsInBf16OnTheDevice_CUDA) {
  // P2..P5 of two 800x1344 images, 256 channels, in bf16 as autocast leaves them: RoIAlign's
  // table is one bf16 copy (the float atlas it replaced was twice that), gone after backward
  // starts, and the output is bf16.
  const torch::Device device(torch::kCUDA, 0);
  std::vector<std::pair<int64_t, int64_t>> sizes{{200, 336}, {100, 168}, {50, 84}, {25, 42}};
  std::vector<torch::Tensor> levels;
  int64_t bytes = 0;
  for (const auto& [h, w] : sizes) {
    levels.push_back(torch::randn({2, 256, h, w}, torch::TensorOptions().device(device))
                         .to(torch::kBFloat16)
                         .requires_grad_());
    bytes += levels.back().numel() * 2;
  }
  const FeatureRows layout(sizes, {0.25, 0.125, 0.0625, 0.03125}, device);
  const auto r = random_rois(2, 64, 4);
  const auto rois = r.rois.to(device), image = r.image.to(device), level = r.level.to(device);
  torch::cuda::synchronize();
  const int64_t before = memory_stats(device).allocated_current;
  reset_peak_memory(device);
  torch::Tensor out;
  {
    const auto rows = layout.pack(levels);
    EXPECT_EQ(rows.scalar_type(), torch::kBFloat16);
    out = roi_align(rows, layout, rois, image, level, 7, 2);
  }
  torch::cuda::synchronize();
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  const auto stats = memory_stats(device);
  EXPECT_LT(stats.allocated_peak - before, bytes + bytes / 4) << "a copy beyond the bf16 table";
  // Nothing of the table is kept for backward: only the output and its small index tensors.
  EXPECT_LT(stats.allocated_current - before, bytes / 8);
  out.to(torch::kFloat).sum().backward();
  EXPECT_EQ(levels[0].grad().scalar_type(), torch::kBFloat16);
}

}  // namespace
}  // namespace gpubench::models::detection
