// Precompiled header for every gpubench target: the heavy libtorch headers plus the std and
// third-party headers most translation units use. Sources still include what they use, so a
// build with -DGPUBENCH_USE_PCH=OFF catches a missing include.
#pragma once

#include <torch/torch.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
