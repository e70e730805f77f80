// Pix2PixHD specifics: the generator and discriminator parameter breakdowns against the spec, the
// instance edge map on a hand-made map, the 36-channel input, the synthetic Cityscapes batch, the
// detach of the fake for D, and one training iteration updating both networks.
#include "models/pix2pixhd.h"

#include "gpubench/config/config.h"
#include "gpubench/train/registry.h"
#include "tests/builtin_store.h"

#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>

namespace gpubench::models {
namespace {

using testing::builtin_store;

const ModelConfig& config() { return builtin_store().model("pix2pixhd"); }

int64_t count(const torch::nn::Module& m) { return count_trainable(m.parameters()); }

int64_t count_all(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// Full-size options as the shipped config sets them.
LocalEnhancerOptions full_generator_options() {
  const Params& m = config().model;
  return LocalEnhancerOptions(m.i64("label_classes") + 1, m.i64("output_channels"))
      .ngf(m.i64("ngf"))
      .global_downsamples(m.i64("global_downsamples"))
      .global_blocks(m.i64("global_blocks"))
      .local_enhancers(m.i64("local_enhancers"))
      .local_blocks(m.i64("local_blocks"));
}

TEST(Pix2PixHDTest, GeneratorParameterBreakdownMatchesTheSpec) {
  // spec image §4: global part 182,537,344 + local part 319,715 = 182,857,059.
  LocalEnhancer g(full_generator_options());
  EXPECT_EQ(count(*g->global), 182537344);
  EXPECT_EQ(count(*g->downsample_paths[0]) + count(*g->upsample_paths[0]), 319715);
  // model1_1: Conv7x7 36->32 (56,480) + Conv3x3 32->64 (18,496).
  EXPECT_EQ(count(*g->downsample_paths[0]), 56480 + 18496);
  // One bottleneck block: two 1024->1024 3x3 convolutions with bias.
  EXPECT_EQ(count(*Pix2PixHDResnetBlock(1024)), 2 * (1024 * 1024 * 9 + 1024));
  EXPECT_EQ(count(*g), 182857059);
  // Instance norm has no affine parameters: every parameter is a convolution's.
  for (const auto& item : g->named_parameters()) {
    const auto& name = item.key();
    EXPECT_TRUE(name.find("weight") != std::string::npos || name.find("bias") != std::string::npos)
        << name;
  }
}

TEST(Pix2PixHDTest, GlobalGeneratorAloneIsThe512pGenerator) {
  // The 512p recipe's GlobalGenerator (ngf 64, with its output layer): 182,546,755 (spec §4).
  GlobalGenerator g(GlobalGeneratorOptions(36, 3).ngf(64).downsamples(4).blocks(9));
  EXPECT_EQ(count(*g), 182546755);
}

TEST(Pix2PixHDTest, DiscriminatorParameterBreakdownMatchesTheSpec) {
  MultiscaleDiscriminator d(PatchDiscriminatorOptions(39).ndf(64).layers(3).scales(3));
  ASSERT_EQ(d->discriminators.size(), 3u);
  // 39->64, 64->128, 128->256, 256->512, 512->1, all 4x4 with bias.
  const int64_t per_scale = (39 * 64 * 16 + 64) + (64 * 128 * 16 + 128) + (128 * 256 * 16 + 256) +
                            (256 * 512 * 16 + 512) + (512 * 16 + 1);
  EXPECT_EQ(per_scale, 2801601);
  for (const auto& scale : d->discriminators) {
    EXPECT_EQ(count(*scale), per_scale);
    EXPECT_EQ(scale->stages.size(), 5u);
  }
  EXPECT_EQ(count(*d), 8404803);
}

TEST(Pix2PixHDTest, VggIsFrozenAndNotCounted) {
  Vgg19Features vgg;
  EXPECT_EQ(count_all(*vgg), 12944960);  // features[0:30] of torchvision's vgg19
  EXPECT_EQ(count(*vgg), 0);
  ASSERT_EQ(vgg->slices->size(), 5u);
  // Slice outputs at relu1_1 .. relu5_1: 64, 128, 256, 512, 512 channels at 1, 1/2 .. 1/16.
  const auto features = vgg->forward(torch::rand({1, 3, 32, 64}) * 2 - 1);
  const std::vector<std::vector<int64_t>> expected = {
      {1, 64, 32, 64}, {1, 128, 16, 32}, {1, 256, 8, 16}, {1, 512, 4, 8}, {1, 512, 2, 4}};
  ASSERT_EQ(features.size(), expected.size());
  for (std::size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(features[k].sizes().vec(), expected[k]) << k;
    EXPECT_GE(features[k].min().item<float>(), 0.0f) << k;  // after a ReLU
  }
}

TEST(Pix2PixHDTest, EdgeMapOnAHandMadeInstanceMap) {
  // A pixel is an edge when a 4-neighbour has another id (get_edges).
  const auto instance = torch::tensor({1, 1, 2, 2, 2,  //
                                       1, 1, 2, 2, 2,  //
                                       3, 3, 3, 2, 2,  //
                                       3, 3, 3, 3, 3},
                                      torch::kInt)
                            .view({1, 1, 4, 5});
  const auto expected = torch::tensor({0, 1, 1, 0, 0,  //
                                       1, 1, 1, 0, 0,  //
                                       1, 1, 1, 1, 1,  //
                                       0, 0, 0, 1, 1},
                                      torch::kFloat)
                            .view({1, 1, 4, 5});
  const auto edges = instance_edges(instance);
  EXPECT_EQ(edges.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(edges, expected)) << edges;
  // One id everywhere: no edges; each image of a batch on its own.
  const auto batch = torch::cat({instance, torch::full_like(instance, 7)});
  EXPECT_TRUE(torch::equal(instance_edges(batch)[0], expected[0]));
  EXPECT_EQ(instance_edges(batch)[1].sum().item<float>(), 0.0f);
}

TEST(Pix2PixHDTest, OneHotInputHas36Channels) {
  const int64_t classes = config().model.i64("label_classes");
  ASSERT_EQ(classes, 35);
  const CityscapesBatch b(2, 32, 64, classes, 12, torch::kCPU, 3);
  const auto input = encode_label_input(b.label, b.instance, classes);
  ASSERT_EQ(input.sizes().vec(), (std::vector<int64_t>{2, 36, 32, 64}));
  EXPECT_EQ(input.scalar_type(), torch::kFloat);
  const auto one_hot = input.narrow(1, 0, classes);
  EXPECT_TRUE(torch::equal(one_hot.sum(1), torch::ones({2, 32, 64})));
  EXPECT_TRUE(torch::equal(one_hot.argmax(1, /*keepdim=*/true), b.label));
  EXPECT_TRUE(torch::equal(input.narrow(1, classes, 1), instance_edges(b.instance)));
  // Without instance maps (--no_instance) the input is the one-hot labels alone.
  EXPECT_EQ(encode_label_input(b.label, torch::Tensor(), classes).size(1), 35);
}

TEST(Pix2PixHDTest, SyntheticBatchLooksLikeCityscapes) {
  const int64_t classes = 35, regions = 16;
  const CityscapesBatch b(2, 64, 128, classes, regions, torch::kCPU, 0);
  ASSERT_EQ(b.label.sizes().vec(), (std::vector<int64_t>{2, 1, 64, 128}));
  ASSERT_EQ(b.instance.sizes().vec(), (std::vector<int64_t>{2, 1, 64, 128}));
  ASSERT_EQ(b.image.sizes().vec(), (std::vector<int64_t>{2, 3, 64, 128}));
  EXPECT_EQ(b.label.scalar_type(), torch::kLong);
  EXPECT_EQ(b.instance.scalar_type(), torch::kInt);
  EXPECT_GE(b.label.min().item<int64_t>(), 0);
  EXPECT_LT(b.label.max().item<int64_t>(), classes);
  EXPECT_GE(b.image.min().item<float>(), -1.0f);
  EXPECT_LE(b.image.max().item<float>(), 1.0f);
  // Cityscapes instanceIds: class * 1000 + n for person .. bicycle (24-33), the class otherwise.
  const auto label = b.label.to(torch::kInt);
  const auto thing = b.instance >= 1000;
  EXPECT_TRUE(torch::equal(torch::where(thing, b.instance.div(1000, "floor"), b.instance), label));
  EXPECT_TRUE((label.masked_select(thing) >= 24).all().item<bool>());
  EXPECT_TRUE((label.masked_select(thing) <= 33).all().item<bool>());
  const auto stuff = label.masked_select(thing.logical_not());
  EXPECT_TRUE(((stuff < 24) | (stuff > 33)).all().item<bool>());
  // Regions: at most `regions` distinct ids per image, and edges are a thin minority.
  for (int64_t i = 0; i < 2; ++i) {
    const auto ids = std::get<0>(at::_unique(b.instance[i]));
    EXPECT_GT(ids.numel(), 1);
    EXPECT_LE(ids.numel(), regions);
  }
  const double edge_share = instance_edges(b.instance).mean().item<double>();
  EXPECT_GT(edge_share, 0.0);
  EXPECT_LT(edge_share, 0.25);
  // Deterministic from the seed.
  const CityscapesBatch again(2, 64, 128, classes, regions, torch::kCPU, 0);
  EXPECT_TRUE(torch::equal(again.label, b.label));
  EXPECT_TRUE(torch::equal(again.instance, b.instance));
  EXPECT_TRUE(torch::equal(again.image, b.image));
  const CityscapesBatch other(2, 64, 128, classes, regions, torch::kCPU, 1);
  EXPECT_FALSE(torch::equal(other.label, b.label));
}

TEST(Pix2PixHDTest, ShapesAtSmokeSize) {
  const Params& m = config().smoke_model;
  const int64_t h = m.i64("height"), w = m.i64("width"), classes = m.i64("label_classes");
  LocalEnhancer g(LocalEnhancerOptions(classes + 1, 3)
                      .ngf(m.i64("ngf"))
                      .global_downsamples(m.i64("global_downsamples"))
                      .global_blocks(m.i64("global_blocks"))
                      .local_blocks(m.i64("local_blocks")));
  MultiscaleDiscriminator d(PatchDiscriminatorOptions(classes + 4).ndf(m.i64("ndf")));
  const CityscapesBatch b(2, h, w, classes, 6, torch::kCPU, 0);
  const auto fake = g->forward(encode_label_input(b.label, b.instance, classes));
  ASSERT_EQ(fake.sizes().vec(), (std::vector<int64_t>{2, 3, h, w}));
  EXPECT_LE(fake.abs().max().item<float>(), 1.0f);  // tanh
  const auto pred =
      d->forward(torch::cat({encode_label_input(b.label, b.instance, classes), fake}, 1));
  ASSERT_EQ(pred.size(), 3u);
  // Conv4x4 s2 p2 maps n to n / 2 + 1, s1 p2 maps n to n + 1: at 1024x2048 the finest scale
  // ends at 131x259 (spec §4); at 32x64, 7x11; the next scales see 16x32 and 8x16.
  const std::vector<std::vector<int64_t>> last = {{2, 1, 7, 11}, {2, 1, 5, 7}, {2, 1, 4, 5}};
  for (std::size_t i = 0; i < pred.size(); ++i) {
    ASSERT_EQ(pred[i].size(), 5u);
    EXPECT_EQ(pred[i].back().sizes().vec(), last[i]) << i;
    EXPECT_EQ(pred[i][3].size(1), 8 * m.i64("ndf")) << i;
  }
}

TEST(Pix2PixHDTest, ShapesAtFullResolution) {
  // The shipped layer structure at the shipped 2048x1024 (spec image §4: --resize_or_crop none),
  // one image, no gradient. A full-width forward (G 748 G MACs, each D pass 167 G) takes minutes
  // on this CPU, so only the widths shrink (ngf 32 -> 1, ndf 64 -> 2): every kernel, stride,
  // padding, downsampling and block count stays the config's, and those alone fix the spatial
  // sizes; the full widths are checked by the parameter breakdowns above.
  const Params& m = config().model;
  const int64_t h = m.i64("height"), w = m.i64("width");
  ASSERT_EQ(h, 1024);
  ASSERT_EQ(w, 2048);
  const int64_t ndf = 2;
  LocalEnhancer g(full_generator_options().ngf(1));
  MultiscaleDiscriminator d(PatchDiscriminatorOptions(m.i64("label_classes") + 1 + 3)
                                .ndf(ndf)
                                .layers(m.i64("discriminator_layers"))
                                .scales(m.i64("discriminators")));
  torch::NoGradGuard no_grad;
  const auto input = torch::rand({1, 36, h, w});  // 35 one-hot labels + the edge map
  const auto fake = g->forward(input);
  EXPECT_EQ(fake.sizes().vec(), (std::vector<int64_t>{1, 3, 1024, 2048}));
  const auto pred = d->forward(torch::cat({input, fake}, 1));  // 39 channels
  ASSERT_EQ(pred.size(), 3u);
  // Scale i sees the input after i AvgPool(3, 2, 1): 1024x2048, 512x1024, 256x512. Then
  // Conv4x4 s2 p2 maps n to n / 2 + 1 three times and Conv4x4 s1 p2 maps n to n + 1 twice; the
  // last maps are the spec's 131x259, 67x131 and 35x67. Channels ndf, 2, 4, 8 x ndf, then 1.
  const std::vector<std::vector<std::vector<int64_t>>> expected = {
      {{513, 1025}, {257, 513}, {129, 257}, {130, 258}, {131, 259}},
      {{257, 513}, {129, 257}, {65, 129}, {66, 130}, {67, 131}},
      {{129, 257}, {65, 129}, {33, 65}, {34, 66}, {35, 67}}};
  const std::vector<int64_t> channels = {ndf, 2 * ndf, 4 * ndf, 8 * ndf, 1};
  for (std::size_t i = 0; i < pred.size(); ++i) {
    ASSERT_EQ(pred[i].size(), 5u) << i;
    for (std::size_t j = 0; j < 5; ++j) {
      EXPECT_EQ(pred[i][j].sizes().vec(),
                (std::vector<int64_t>{1, channels[j], expected[i][j][0], expected[i][j][1]}))
          << "scale " << i << " stage " << j;
    }
  }
}

TEST(Pix2PixHDTest, DLossNeverReachesTheGeneratorAndGLossReachesBoth) {
  const Params& m = config().smoke_model;
  const int64_t classes = m.i64("label_classes");
  torch::manual_seed(0);
  LocalEnhancer g(LocalEnhancerOptions(classes + 1, 3)
                      .ngf(m.i64("ngf"))
                      .global_downsamples(m.i64("global_downsamples"))
                      .global_blocks(m.i64("global_blocks"))
                      .local_blocks(m.i64("local_blocks")));
  MultiscaleDiscriminator d(PatchDiscriminatorOptions(classes + 4).ndf(m.i64("ndf")));
  Vgg19Features vgg;
  const CityscapesBatch b(1, m.i64("height"), m.i64("width"), classes, 6, torch::kCPU, 0);
  const auto input = encode_label_input(b.label, b.instance, classes);
  auto losses = pix2pixhd_losses(*g, *d, vgg.get(), input, b.image, Pix2PixHDLossOptions{});
  for (const auto* loss : {&losses.g_gan, &losses.g_feat, &losses.g_vgg, &losses.d_real,
                           &losses.d_fake, &losses.g, &losses.d}) {
    ASSERT_TRUE(loss->defined());
    EXPECT_EQ(loss->dim(), 0);
    EXPECT_TRUE(std::isfinite(loss->item<double>()));
  }
  EXPECT_NEAR(losses.g.item<double>(), (losses.g_gan + losses.g_feat + losses.g_vgg).item<double>(),
              1e-5);
  EXPECT_NEAR(losses.d.item<double>(), 0.5 * (losses.d_fake + losses.d_real).item<double>(), 1e-6);

  // loss_D sees the fake detached: no generator gradient at all.
  losses.d.backward();
  for (const auto& p : g->parameters()) EXPECT_FALSE(p.grad().defined());
  for (const auto& p : d->parameters()) EXPECT_TRUE(p.grad().defined());
  for (auto& p : d->parameters()) p.mutable_grad() = torch::Tensor();
  // loss_G reaches the generator and, through D(fake), the discriminator (train.py zeroes those
  // before the D step); never the frozen VGG.
  losses.g.backward();
  for (const auto& p : g->parameters()) EXPECT_TRUE(p.grad().defined());
  for (const auto& p : d->parameters()) EXPECT_TRUE(p.grad().defined());
  for (const auto& p : vgg->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Pix2PixHDTest, OneIterationUpdatesBothNetworks) {
  const ModelConfig& c = config();
  StepContext ctx;
  ctx.config = &c;
  ctx.model = c.smoke_model;
  ctx.optimizer = c.optimizer;
  ctx.batch = c.smoke_batch;
  ctx.device = torch::kCPU;
  auto step = builtin_registry().get(c.architecture).prepare(ctx);
  const auto networks = step->parameters();
  ASSERT_EQ(networks.size(), 2u);
  std::map<std::string, std::vector<torch::Tensor>> before;
  for (const auto& [network, params] : networks) {
    for (const auto& p : params) {
      EXPECT_TRUE(p.requires_grad());
      before[network].push_back(p.detach().clone());
    }
  }
  EXPECT_EQ(step->run(), static_cast<double>(c.smoke_batch));
  const auto losses = step->losses();
  for (const char* name : {"g_gan", "g_feat", "g_vgg", "d_real", "d_fake", "g", "d"}) {
    ASSERT_TRUE(losses.count(name)) << name;
    EXPECT_TRUE(std::isfinite(losses.at(name).item<double>())) << name;
  }
  for (const auto& [network, params] : step->parameters()) {
    int64_t changed = 0;
    for (std::size_t i = 0; i < params.size(); ++i) {
      changed += !torch::equal(params[i].detach(), before[network][i]);
    }
    // Adam moves every parameter with a nonzero gradient.
    EXPECT_EQ(changed, static_cast<int64_t>(params.size())) << network;
  }
  const auto info = step->batch_info();
  EXPECT_EQ(info["input_channels"].get<int64_t>(), c.smoke_model.i64("label_classes") + 1);
}

}  // namespace
}  // namespace gpubench::models
