#include "models/detection_ops.h"

#include "gpubench/base/compat.h"

#include <c10/core/InferenceMode.h>
#include <torch/torch.h>

#include <algorithm>
#include <limits>

namespace gpubench::models::detection {

namespace F = torch::nn::functional;

namespace {

/// Coordinate k of boxes [..., 4] as [...].
torch::Tensor coord(const torch::Tensor& boxes, int64_t k) { return boxes.select(-1, k); }

/// Suppression matrices are built this many pairs at a time, so the float temporaries of the
/// IoU stay near 256 MB per array whatever the batch.
constexpr int64_t kNmsPairsPerChunk = int64_t{64} << 20;
/// Row blocks of a suppression matrix: 8 compute 56% of it instead of all.
constexpr int64_t kNmsRowBlocks = 8;

}  // namespace

torch::Tensor box_iou(const torch::Tensor& a, const torch::Tensor& b) {
  const auto fa = a.to(torch::kFloat), fb = b.to(torch::kFloat);
  // [..., M, 1] against [..., 1, K]; legacy boxes cover x1..x2 inclusive, hence the +1.
  const auto ax1 = coord(fa, 0).unsqueeze(-1), ay1 = coord(fa, 1).unsqueeze(-1);
  const auto ax2 = (coord(fa, 2) + 1).unsqueeze(-1), ay2 = (coord(fa, 3) + 1).unsqueeze(-1);
  const auto bx1 = coord(fb, 0).unsqueeze(-2), by1 = coord(fb, 1).unsqueeze(-2);
  const auto bx2 = (coord(fb, 2) + 1).unsqueeze(-2), by2 = (coord(fb, 3) + 1).unsqueeze(-2);
  // In place where possible: at most three [..., M, K] arrays live at once.
  auto inter = torch::minimum(ax2, bx2);
  inter.sub_(torch::maximum(ax1, bx1)).clamp_min_(0);
  auto height = torch::minimum(ay2, by2);
  height.sub_(torch::maximum(ay1, by1)).clamp_min_(0);
  inter.mul_(height);
  height = (ax2 - ax1).mul_(ay2 - ay1) + (bx2 - bx1).mul_(by2 - by1);  // area a + area b
  height.sub_(inter);
  return inter.div_(height);
}

// ---- Box coder ----

BoxCoder::BoxCoder(std::array<double, 4> weights, double clip) : weights_(weights), clip_(clip) {}

torch::Tensor BoxCoder::encode(const torch::Tensor& targets,
                               const torch::Tensor& references) const {
  const auto t = targets.to(torch::kFloat), r = references.to(torch::kFloat);
  const auto rw = coord(r, 2) - coord(r, 0) + 1, rh = coord(r, 3) - coord(r, 1) + 1;
  const auto rx = coord(r, 0) + 0.5 * rw, ry = coord(r, 1) + 0.5 * rh;
  const auto tw = coord(t, 2) - coord(t, 0) + 1, th = coord(t, 3) - coord(t, 1) + 1;
  const auto tx = coord(t, 0) + 0.5 * tw, ty = coord(t, 1) + 0.5 * th;
  return torch::stack({weights_[0] * (tx - rx) / rw, weights_[1] * (ty - ry) / rh,
                       weights_[2] * torch::log(tw / rw), weights_[3] * torch::log(th / rh)},
                      -1);
}

torch::Tensor BoxCoder::decode(const torch::Tensor& deltas, const torch::Tensor& references) const {
  const auto d = deltas.to(torch::kFloat), r = references.to(torch::kFloat);
  const auto w = coord(r, 2) - coord(r, 0) + 1, h = coord(r, 3) - coord(r, 1) + 1;
  const auto cx = coord(r, 0) + 0.5 * w, cy = coord(r, 1) + 0.5 * h;
  const auto dx = coord(d, 0) / weights_[0], dy = coord(d, 1) / weights_[1];
  const auto dw = (coord(d, 2) / weights_[2]).clamp_max(clip_);
  const auto dh = (coord(d, 3) / weights_[3]).clamp_max(clip_);
  const auto px = dx * w + cx, py = dy * h + cy;
  const auto half_w = 0.5 * torch::exp(dw) * w, half_h = 0.5 * torch::exp(dh) * h;
  return torch::stack({px - half_w, py - half_h, px + half_w - 1, py + half_h - 1}, -1);
}

// ---- Anchors ----

torch::Tensor cell_anchors(int64_t stride, double size, const std::vector<double>& aspect_ratios) {
  // Detectron: a stride x stride base box, reshaped to each ratio at constant area (rounded
  // with numpy's round-half-to-even), then scaled to `size`.
  const double base = static_cast<double>(stride);
  const double center = 0.5 * (base - 1);
  const double scale = size / base;
  std::vector<float> values;
  for (const double ratio : aspect_ratios) {
    const double ws = std::nearbyint(std::sqrt(base * base / ratio));
    const double hs = std::nearbyint(ws * ratio);
    const double w = ws * scale, h = hs * scale;
    for (const double v : {center - 0.5 * (w - 1), center - 0.5 * (h - 1), center + 0.5 * (w - 1),
                           center + 0.5 * (h - 1)}) {
      values.push_back(static_cast<float>(v));
    }
  }
  return torch::tensor(values).view({static_cast<int64_t>(aspect_ratios.size()), 4});
}

torch::Tensor grid_anchors(const torch::Tensor& cell, int64_t stride, int64_t height,
                           int64_t width) {
  const auto options = cell.options().dtype(torch::kFloat);
  const auto sx = torch::arange(width, options) * static_cast<double>(stride);
  const auto sy = torch::arange(height, options) * static_cast<double>(stride);
  const auto xs = sx.view({1, width}).expand({height, width});
  const auto ys = sy.view({height, 1}).expand({height, width});
  const auto shifts = torch::stack({xs, ys, xs, ys}, -1).reshape({-1, 1, 4});
  return (shifts + cell.to(torch::kFloat).unsqueeze(0)).reshape({-1, 4});
}

torch::Tensor visible_anchors(const torch::Tensor& anchors, int64_t image_height,
                              int64_t image_width, double straddle_thresh) {
  const double t = straddle_thresh;
  return coord(anchors, 0).ge(-t) & coord(anchors, 1).ge(-t) &
         coord(anchors, 2).lt(static_cast<double>(image_width) + t) &
         coord(anchors, 3).lt(static_cast<double>(image_height) + t);
}

// ---- Matching and sampling ----

torch::Tensor Matcher::operator()(const torch::Tensor& quality) const {
  const auto [best, matches] = quality.max(-2);
  auto result = matches.masked_fill(best.lt(low_threshold), kBelowLowThreshold);
  result.masked_fill_(best.ge(low_threshold) & best.lt(high_threshold), kBetweenThresholds);
  if (allow_low_quality_matches) {
    // Every prediction tied for some ground truth's best IoU keeps its own best match.
    const auto highest = std::get<0>(quality.max(-1, /*keepdim=*/true));
    result = torch::where(quality.eq(highest).any(-2), matches, result);
  }
  return result;
}

BalancedSample balanced_sample(const torch::Tensor& positive, const torch::Tensor& negative,
                               int64_t batch_per_image, double positive_fraction) {
  const int64_t images = positive.size(0), candidates = positive.size(1);
  const auto real = torch::TensorOptions().device(positive.device()).dtype(torch::kFloat);
  const auto index = real.dtype(torch::kLong);
  const int64_t positive_cap = std::min(
      static_cast<int64_t>(static_cast<double>(batch_per_image) * positive_fraction), candidates);
  const int64_t negative_cap = std::min(batch_per_image, candidates);
  // A random subset of k is the top k of random keys; non-candidates get key -1.
  auto positive_key = torch::rand({images, candidates}, real).masked_fill_(~positive, -1);
  auto [positive_value, positive_index] = positive_key.topk(positive_cap, 1);
  auto positive_valid = positive_value.ge(0);
  auto negative_key = torch::rand({images, candidates}, real).masked_fill_(~negative, -1);
  auto [negative_value, negative_index] = negative_key.topk(negative_cap, 1);
  // Negatives fill what the positives leave of the batch.
  const auto room = batch_per_image - positive_valid.sum(1, /*keepdim=*/true);
  auto negative_valid =
      negative_value.ge(0) & torch::arange(negative_cap, index).unsqueeze(0).lt(room);

  BalancedSample out;
  out.positive_index = positive_index;
  out.positive_valid = positive_valid;
  // Valid entries first (positives, then negatives), in slot order.
  const int64_t slots = positive_cap + negative_cap;
  const auto all_index = torch::cat({positive_index, negative_index}, 1);
  const auto all_valid = torch::cat({positive_valid, negative_valid}, 1);
  const auto all_positive = torch::cat({positive_valid, torch::zeros_like(negative_valid)}, 1);
  const auto order_key = all_valid.to(torch::kFloat) * static_cast<double>(slots) -
                         torch::arange(slots, real).unsqueeze(0);
  const auto order = std::get<1>(order_key.topk(std::min(batch_per_image, candidates), 1));
  out.index = all_index.gather(1, order);
  out.valid = all_valid.gather(1, order);
  out.positive = all_positive.gather(1, order);
  return out;
}

// ---- Non-maximum suppression ----

void BatchedNms::prepare(int64_t groups, int64_t n, const torch::Device& device) {
  if (removed_.defined() && removed_.size(0) == groups && removed_.size(1) == n &&
      removed_.device() == device) {
    return;
  }
  const auto flags = torch::TensorOptions().dtype(torch::kBool).device(device);
  removed_ = torch::empty({groups, n}, flags);
  scratch_ = torch::empty({groups, n}, flags);
  removed_i_.clear();
  removed_after_i_.clear();
  scratch_i_.clear();
  for (int64_t i = 0; i + 1 < n; ++i) {
    removed_i_.push_back(removed_.narrow(1, i, 1));
    removed_after_i_.push_back(removed_.narrow(1, i + 1, n - i - 1));
    scratch_i_.push_back(scratch_.narrow(1, 0, n - i - 1));
  }
}

torch::Tensor BatchedNms::operator()(const torch::Tensor& boxes, const torch::Tensor& valid,
                                     double threshold) {
  if (boxes.size(1) == 0) return valid.clone();
  {
    // Inference mode: no autograd bookkeeping on the thousands of small ops below.
    c10::InferenceMode inference;
    scan(boxes, valid, threshold);
  }
  return removed_.logical_not();
}

void BatchedNms::scan(const torch::Tensor& boxes, const torch::Tensor& valid, double threshold) {
  const int64_t groups = boxes.size(0), n = boxes.size(1);
  prepare(groups, n, valid.device());
  // suppress[g, i, k]: box i removes box k if i is kept. The scan reads only k > i, so rows are
  // built in blocks from their first column on, which skips most of the lower triangle (left
  // unset); groups are built in chunks.
  auto suppress = torch::empty({groups, n, n}, valid.options().dtype(torch::kBool));
  const int64_t chunk = std::max<int64_t>(1, kNmsPairsPerChunk / (n * n));
  const int64_t row_blocks = std::min(kNmsRowBlocks, n);
  for (int64_t g = 0; g < groups; g += chunk) {
    const int64_t size = std::min(chunk, groups - g);
    const auto b = boxes.narrow(0, g, size);
    for (int64_t block = 0; block < row_blocks; ++block) {
      const int64_t first = block * n / row_blocks, rows = (block + 1) * n / row_blocks - first;
      auto out = suppress.narrow(0, g, size).narrow(1, first, rows).narrow(2, first, n - first);
      torch::gt_out(out, box_iou(b.narrow(1, first, rows), b.narrow(1, first, n - first)),
                    threshold);
    }
  }
  // The greedy scan: box i, if still standing, removes every later box it overlaps. Step i
  // touches only the boxes after i.
  torch::logical_not_out(removed_, valid);
  for (int64_t i = 0; i + 1 < n; ++i) {
    const auto row = suppress.as_strided({groups, n - i - 1}, {n * n, 1}, i * n + i + 1);
    // row > removed_i exactly where box i is standing and overlaps.
    torch::gt_out(scratch_i_[i], row, removed_i_[i]);
    removed_after_i_[i].logical_or_(scratch_i_[i]);
  }
}

torch::Tensor batched_nms(const torch::Tensor& boxes, const torch::Tensor& valid,
                          double threshold) {
  return BatchedNms()(boxes, valid, threshold);
}

torch::Tensor roi_levels(const torch::Tensor& boxes, int64_t k_min, int64_t k_max,
                         double canonical_scale, int64_t canonical_level, double eps) {
  const auto b = boxes.to(torch::kFloat);
  const auto area = (coord(b, 2) - coord(b, 0) + 1) * (coord(b, 3) - coord(b, 1) + 1);
  const auto ratio = area.sqrt() / canonical_scale + eps;
  // floor(canonical + log2(ratio)) >= k  <=>  ratio >= 2^(k - canonical).
  auto level = torch::zeros(ratio.sizes(), ratio.options().dtype(torch::kLong));
  for (int64_t k = k_min + 1; k <= k_max; ++k) {
    level.add_(ratio.ge(std::exp2(static_cast<double>(k - canonical_level))));
  }
  return level;
}

// ---- RoIAlign ----

namespace {

/// FeatureRows::pack as an autograd function: one copy of the levels into the table forward;
/// backward gives each level its rows of the table's gradient as a [N, C, H, W] view.
struct PackRows : public torch::autograd::Function<PackRows> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::TensorList levels,
                               int64_t rows_per_image, torch::ScalarType dtype) {
    const auto& first = levels[0];
    const int64_t images = first.size(0), channels = first.size(1);
    auto rows = torch::empty({images * rows_per_image, channels}, first.options().dtype(dtype));
    int64_t offset = 0;
    std::vector<int64_t> shapes;
    for (const auto& level : levels) {
      const int64_t h = level.size(2), w = level.size(3);
      rows.narrow(0, offset, images * h * w)
          .view({images, h, w, channels})
          .copy_(level.permute({0, 2, 3, 1}));
      offset += images * h * w;
      shapes.insert(shapes.end(), {h, w, static_cast<int64_t>(level.scalar_type())});
    }
    ctx->saved_data["shapes"] = shapes;
    return rows;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto shapes = ctx->saved_data["shapes"].toIntVector();
    const auto& grad = grads[0];
    const int64_t levels = static_cast<int64_t>(shapes.size()) / 3;
    const int64_t channels = grad.size(1);
    int64_t pixels = 0;  // per image
    for (int64_t l = 0; l < levels; ++l) pixels += shapes[3 * l] * shapes[3 * l + 1];
    const int64_t images = grad.size(0) / pixels;
    torch::autograd::variable_list out;
    int64_t offset = 0;
    for (int64_t l = 0; l < levels; ++l) {
      const int64_t h = shapes[3 * l], w = shapes[3 * l + 1];
      out.push_back(grad.narrow(0, offset, images * h * w)
                        .view({images, h, w, channels})
                        .permute({0, 3, 1, 2})
                        .to(static_cast<torch::ScalarType>(shapes[3 * l + 2])));
      offset += images * h * w;
    }
    out.emplace_back();  // rows_per_image
    out.emplace_back();  // dtype
    return out;
  }
};

/// The two bilinear taps of each sample coordinate `s` [R, S] along a side of `size` [R, 1]
/// pixels, as the legacy kernel takes them: (index [R, S, 2] int64, weight [R, S, 2] float).
/// A sample beyond [-1, size] (or not finite) has weight 0 and index 0; one within a pixel
/// outside reads the border pixel.
std::pair<torch::Tensor, torch::Tensor> bilinear_taps(const torch::Tensor& s,
                                                      const torch::Tensor& size) {
  const auto outside = (s.ge(-1) & s.le(size)).logical_not().unsqueeze(-1);
  const auto c = s.clamp_min(0);
  const auto last = (size - 1).expand_as(c);
  const auto floor = c.floor();
  const auto edge = floor.ge(last);
  const auto low = torch::where(edge, last, floor);
  const auto frac = torch::where(edge, torch::zeros_like(c), c - low);
  const auto high = torch::where(edge, low, low + 1);
  auto index = torch::stack({low, high}, -1).masked_fill(outside, 0).to(torch::kLong);
  auto weight = torch::stack({1 - frac, frac}, -1).masked_fill(outside, 0);
  return {index, weight};
}

}  // namespace

FeatureRows::FeatureRows(std::vector<std::pair<int64_t, int64_t>> sizes, std::vector<double> scales,
                         const torch::Device& device)
    : sizes_(std::move(sizes)) {
  TORCH_CHECK(!sizes_.empty() && sizes_.size() == scales.size(),
              "FeatureRows: one scale per level, at least one level");
  std::vector<float> geometry;
  std::vector<int64_t> layout;
  for (std::size_t l = 0; l < sizes_.size(); ++l) {
    const auto [h, w] = sizes_[l];
    TORCH_CHECK(h > 0 && w > 0, "FeatureRows: empty level ", l);
    for (const double v : {scales[l], static_cast<double>(h), static_cast<double>(w)}) {
      geometry.push_back(static_cast<float>(v));
    }
    layout.insert(layout.end(), {pixels_, h * w, w});
    pixels_ += h * w;
  }
  geometry_ = torch::tensor(geometry).view({levels(), 3}).to(device);
  layout_ = torch::tensor(layout).view({levels(), 3}).to(device);
}

torch::Tensor FeatureRows::pack(const std::vector<torch::Tensor>& levels) const {
  TORCH_CHECK(static_cast<int64_t>(levels.size()) == this->levels(),
              "FeatureRows: ", this->levels(), " levels expected, got ", levels.size());
  for (std::size_t l = 0; l < levels.size(); ++l) {
    TORCH_CHECK(levels[l].dim() == 4 && levels[l].size(2) == sizes_[l].first &&
                    levels[l].size(3) == sizes_[l].second &&
                    levels[l].size(0) == levels[0].size(0) &&
                    levels[l].size(1) == levels[0].size(1),
                "FeatureRows: level ", l, " has the wrong size");
  }
  const auto& first = levels[0];
  return PackRows::apply(torch::TensorList(levels), pixels_,
                         compat::embedding_bag_dtype(first.scalar_type(), first.device()));
}

torch::Tensor roi_align(const torch::Tensor& rows, const FeatureRows& layout,
                        const torch::Tensor& rois, const torch::Tensor& image,
                        const torch::Tensor& level, int64_t output_size, int64_t sampling_ratio) {
  const int64_t count = rois.size(0), channels = rows.size(1);
  const int64_t images = rows.size(0) / layout.pixels_per_image();
  const int64_t samples = output_size * sampling_ratio;  // per side of a RoI
  const int64_t side = 2 * sampling_ratio;               // taps per side of a bin
  const auto real = rois.options().dtype(torch::kFloat);
  const auto r = rois.to(torch::kFloat);
  const auto g = layout.geometry().index_select(0, level);  // [R, 3]
  const auto t = layout.layout().index_select(0, level);    // [R, 3]
  const auto scale = g.select(1, 0);
  // Legacy RoIAlign: scaled corners without a half-pixel offset, malformed RoIs forced to 1x1.
  const auto x1 = coord(r, 0) * scale, y1 = coord(r, 1) * scale;
  const auto bin_w = (coord(r, 2) * scale - x1).clamp_min(1) / static_cast<double>(output_size);
  const auto bin_h = (coord(r, 3) * scale - y1).clamp_min(1) / static_cast<double>(output_size);
  // Sample j of a side sits at (j + 0.5) / sampling_ratio bins: sampling_ratio per bin.
  const auto offset = (torch::arange(samples, real) + 0.5) / static_cast<double>(sampling_ratio);
  const auto [ix, wx] =
      bilinear_taps(x1.unsqueeze(-1) + offset * bin_w.unsqueeze(-1), g.narrow(1, 2, 1));
  const auto [iy, wy] =
      bilinear_taps(y1.unsqueeze(-1) + offset * bin_h.unsqueeze(-1), g.narrow(1, 1, 1));
  // Bin (py, px) reads the side x side taps of its samples: [R, out, out, side, side].
  const auto first_row = t.select(1, 0) * images + image * t.select(1, 1);  // [R]
  const auto row =
      first_row.view({count, 1, 1, 1, 1}) +
      iy.view({count, output_size, 1, side, 1}) * t.select(1, 2).view({count, 1, 1, 1, 1}) +
      ix.view({count, 1, output_size, 1, side});
  const auto weight = wy.view({count, output_size, 1, side, 1}) *
                      wx.view({count, 1, output_size, 1, side}) /
                      static_cast<double>(sampling_ratio * sampling_ratio);
  const int64_t taps = side * side, bags = count * output_size * output_size;
  const auto index = row.reshape({-1}).to(torch::kInt);
  const auto bag_offsets = torch::arange(0, bags * taps, taps, index.options());
  torch::Tensor out;
  {
    // The maps' dtype whatever autocast would choose: no float copy of the table.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    out = std::get<0>(torch::embedding_bag(rows, index, bag_offsets, /*scale_grad_by_freq=*/false,
                                           /*mode=sum*/ 0, /*sparse=*/false,
                                           weight.reshape({-1}).to(rows.scalar_type()),
                                           /*include_last_offset=*/false));
  }
  // [R * out * out, C] -> [R, C, out, out] (NCHW, as the heads' convs and fc6 read it).
  return out.view({count, output_size, output_size, channels}).permute({0, 3, 1, 2}).contiguous();
}

torch::Tensor roi_align(const torch::Tensor& features, const torch::Tensor& rois, double scale,
                        int64_t output_size, int64_t sampling_ratio) {
  const FeatureRows layout({{features.size(2), features.size(3)}}, {scale}, features.device());
  const int64_t images = rois.size(0), count = rois.size(1);
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(rois.device());
  const auto image = torch::arange(images, longs).view({images, 1}).expand({images, count});
  return roi_align(layout.pack({features}), layout, rois.reshape({-1, 4}), image.reshape({-1}),
                   torch::zeros({images * count}, longs), output_size, sampling_ratio);
}

std::pair<torch::Tensor, torch::Tensor> pack_slots(const torch::Tensor& keep, int64_t slots) {
  const auto flat = keep.reshape({-1});
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(keep.device());
  // An entry's slot is the number of kept entries before it; the others go to a spare slot.
  const auto position = flat.to(torch::kLong).cumsum(0) - 1;
  const auto target = position.masked_fill(flat.logical_not(), slots);
  auto source = torch::zeros({slots + 1}, longs)
                    .scatter_(0, target.clamp_max(slots), torch::arange(flat.numel(), longs));
  const auto valid = torch::arange(slots, longs).lt(flat.sum());
  return {source.narrow(0, 0, slots), valid};
}

torch::Tensor smooth_l1(const torch::Tensor& input, const torch::Tensor& target, double beta) {
  const auto n = (input - target).abs();
  return torch::where(n.lt(beta), n.pow(2) * (0.5 / beta), n - 0.5 * beta);
}

}  // namespace gpubench::models::detection
