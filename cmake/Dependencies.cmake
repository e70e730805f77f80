# Third-party packages. Both supported environments provide them as system packages:
#   Debian 12:    libtorch-dev (1.13, CPU), libfmt-dev 9, libyaml-cpp-dev 0.7, libcli11-dev,
#                 nlohmann-json3-dev, libgtest-dev
#   GPU machine:  the PyTorch wheel's libtorch (2.11+cu130; pass its CMake prefix), fmt,
#                 yaml-cpp 0.8, CLI11, nlohmann-json, gtest
find_package(Torch REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
if(GPUBENCH_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

# The PyTorch wheel bundles fmt 12 headers in its include folder; they shadow the system's
# fmt 9, so only the header-only fmt target links on both (docs/internals.md, "Two libtorch
# versions").
if(NOT TARGET fmt::fmt-header-only)
  message(FATAL_ERROR "fmt::fmt-header-only not found: install libfmt-dev")
endif()

# yaml-cpp names its target `yaml-cpp` up to 0.7 and `yaml-cpp::yaml-cpp` from 0.8 on.
if(TARGET yaml-cpp::yaml-cpp)
  set(GPUBENCH_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(GPUBENCH_YAML_TARGET yaml-cpp)
endif()

# CUDA support follows the libtorch we found: the CUDA code paths compile only against a
# CUDA build of libtorch (they need c10_cuda / torch_cuda).
if(TARGET torch_cuda OR TARGET c10_cuda OR CAFFE2_USE_CUDA OR TORCH_CUDA_LIBRARIES)
  set(GPUBENCH_WITH_CUDA 1)
else()
  set(GPUBENCH_WITH_CUDA 0)
endif()
message(STATUS "gpubench: libtorch ${Torch_VERSION}, CUDA support: ${GPUBENCH_WITH_CUDA}")
