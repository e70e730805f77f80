#include "models/resnet.h"

#include <torch/torch.h>

#include <string>

namespace gpubench::models {

ResNetOptions resnet_options(int64_t depth) {
  switch (depth) {
    case 18:
      return ResNetOptions({2, 2, 2, 2}).bottleneck(false);
    case 34:
      return ResNetOptions({3, 4, 6, 3}).bottleneck(false);
    case 50:
      return ResNetOptions({3, 4, 6, 3});
    case 101:
      return ResNetOptions({3, 4, 23, 3});
    case 152:
      return ResNetOptions({3, 8, 36, 3});
    default:
      TORCH_CHECK(false, "ResNet depth must be 18, 34, 50, 101 or 152, not ", depth);
  }
}

// ---- FrozenBatchNorm2d ----

FrozenBatchNorm2dImpl::FrozenBatchNorm2dImpl(int64_t channels, double eps_) : eps(eps_) {
  weight = register_buffer("weight", torch::ones({channels}));
  bias = register_buffer("bias", torch::zeros({channels}));
  running_mean = register_buffer("running_mean", torch::zeros({channels}));
  running_var = register_buffer("running_var", torch::ones({channels}));
}

torch::Tensor FrozenBatchNorm2dImpl::forward(const torch::Tensor& x) {
  // One fused multiply-add per element; the per-channel scale and shift are tiny.
  const auto scale = weight * (running_var + eps).rsqrt();
  const auto shift = bias - running_mean * scale;
  return x * scale.view({1, -1, 1, 1}).to(x.dtype()) + shift.view({1, -1, 1, 1}).to(x.dtype());
}

// ---- Blocks ----

namespace {

torch::nn::AnyModule make_norm(const ResNetOptions& o, int64_t channels) {
  if (o.frozen_bn()) return torch::nn::AnyModule(FrozenBatchNorm2d(channels, o.bn_eps()));
  return torch::nn::AnyModule(torch::nn::BatchNorm2d(
      torch::nn::BatchNorm2dOptions(channels).eps(o.bn_eps()).momentum(o.bn_momentum())));
}

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1,
                       int64_t dilation = 1) {
  // torchvision's conv3x3 pads by the dilation, which keeps the size at stride 1.
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel)
                               .stride(stride)
                               .padding(kernel == 3 ? dilation : kernel / 2)
                               .dilation(dilation)
                               .bias(false));
}

}  // namespace

ResNetBlockImpl::ResNetBlockImpl(const ResNetOptions& o, int64_t in_channels, int64_t width,
                                 int64_t stride, int64_t dilation) {
  const int64_t out_channels = width * expansion(o.bottleneck());
  if (o.bottleneck()) {
    const int64_t stride_1x1 = o.stride_in_1x1() ? stride : 1;
    const int64_t stride_3x3 = o.stride_in_1x1() ? 1 : stride;
    conv1 = register_module("conv1", conv(in_channels, width, 1, stride_1x1));
    conv2 = register_module("conv2", conv(width, width, 3, stride_3x3, dilation));
    conv3 = register_module("conv3", conv(width, out_channels, 1));
  } else {
    TORCH_CHECK(dilation == 1, "basic ResNet blocks do not support dilation (as torchvision)");
    conv1 = register_module("conv1", conv(in_channels, width, 3, stride));
    conv2 = register_module("conv2", conv(width, width, 3));
  }
  bn1 = make_norm(o, width);
  register_module("bn1", bn1.ptr());
  bn2 = make_norm(o, o.bottleneck() ? width : out_channels);
  register_module("bn2", bn2.ptr());
  if (o.bottleneck()) {
    bn3 = make_norm(o, out_channels);
    register_module("bn3", bn3.ptr());
  }
  if (stride != 1 || in_channels != out_channels) {
    downsample_conv =
        register_module("downsample_conv", conv(in_channels, out_channels, 1, stride));
    downsample_bn = make_norm(o, out_channels);
    register_module("downsample_bn", downsample_bn.ptr());
  }
}

torch::Tensor ResNetBlockImpl::forward(const torch::Tensor& x) {
  auto identity = downsample_conv ? downsample_bn.forward(downsample_conv(x)) : x;
  // In-place ReLUs on norm outputs, as torchvision's ReLU(inplace=True): BatchNorm's backward
  // needs its input, not its output, so this saves a tensor per activation.
  auto out = bn1.forward(conv1(x)).relu_();
  if (conv3) {
    out = bn2.forward(conv2(out)).relu_();
    out = bn3.forward(conv3(out));
  } else {
    out = bn2.forward(conv2(out));
  }
  return (out + identity).relu_();
}

// ---- ResNet ----

ResNetImpl::ResNetImpl(const ResNetOptions& o) : options(o) {
  TORCH_CHECK(o.layers().size() == 4, "a ResNet has four stages");
  TORCH_CHECK(o.replace_stride_with_dilation().size() == 3,
              "replace_stride_with_dilation has one entry per stage 2, 3 and 4");
  TORCH_CHECK(o.frozen_stages() >= 0 && o.frozen_stages() <= 5, "frozen_stages is 0 to 5");
  constexpr int64_t kStemWidth = 64;
  conv1 = register_module(
      "conv1", torch::nn::Conv2d(
                   torch::nn::Conv2dOptions(3, kStemWidth, 7).stride(2).padding(3).bias(false)));
  bn1 = make_norm(o, kStemWidth);
  register_module("bn1", bn1.ptr());

  int64_t in_channels = kStemWidth, dilation = 1;
  const int64_t expansion = ResNetBlockImpl::expansion(o.bottleneck());
  auto make_stage = [&](int64_t stage) {
    const int64_t width = kStemWidth << stage;
    int64_t stride = stage == 0 ? 1 : 2;
    // torchvision's _make_layer: a dilated stage's first block keeps the previous dilation.
    const int64_t previous_dilation = dilation;
    if (stage > 0 && o.replace_stride_with_dilation()[stage - 1]) {
      dilation *= stride;
      stride = 1;
    }
    torch::nn::Sequential blocks;
    for (int64_t i = 0; i < o.layers()[stage]; ++i) {
      blocks->push_back(ResNetBlock(o, in_channels, width, i == 0 ? stride : 1,
                                    i == 0 ? previous_dilation : dilation));
      in_channels = width * expansion;
    }
    return blocks;
  };
  layer1 = register_module("layer1", make_stage(0));
  layer2 = register_module("layer2", make_stage(1));
  layer3 = register_module("layer3", make_stage(2));
  layer4 = register_module("layer4", make_stage(3));
  if (o.num_classes() > 0) {
    fc = register_module("fc", torch::nn::Linear(in_channels, o.num_classes()));
  }

  // torchvision's initialization: Kaiming normal (fan out) for convs, norms at identity.
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, 0, torch::kFanOut, torch::kReLU);
    }
  }
  if (o.zero_init_residual()) {
    for (auto& m : modules(/*include_self=*/false)) {
      auto* block = m->as<ResNetBlock>();
      if (block == nullptr) continue;
      auto& last = block->conv3 ? block->bn3 : block->bn2;
      if (auto* bn = last.ptr()->as<torch::nn::BatchNorm2d>()) bn->weight.zero_();
    }
  }
  // Frozen stages: the stem is stage 1, layer1 stage 2, and so on.
  const std::vector<torch::nn::Module*> frozen_order = {nullptr, layer1.get(), layer2.get(),
                                                        layer3.get(), layer4.get()};
  for (int64_t stage = 0; stage < o.frozen_stages(); ++stage) {
    if (stage == 0) {
      for (auto& p : conv1->parameters()) p.requires_grad_(false);
      for (auto& p : bn1.ptr()->parameters()) p.requires_grad_(false);
    } else {
      for (auto& p : frozen_order[stage]->parameters()) p.requires_grad_(false);
    }
  }
}

std::vector<torch::Tensor> ResNetImpl::stages(const torch::Tensor& x) {
  auto h = torch::max_pool2d(bn1.forward(conv1(x)).relu_(), 3, 2, 1);
  std::vector<torch::Tensor> out;
  for (auto* stage : {&layer1, &layer2, &layer3, &layer4}) {
    h = (*stage)->forward(h);
    out.push_back(h);
  }
  return out;
}

torch::Tensor ResNetImpl::forward(const torch::Tensor& x) {
  auto features = stages(x).back();
  if (!fc) return features;
  return fc(torch::adaptive_avg_pool2d(features, {1, 1}).flatten(1));
}

int64_t ResNetImpl::out_channels() const {
  return (64 << 3) * ResNetBlockImpl::expansion(options.bottleneck());
}

}  // namespace gpubench::models
