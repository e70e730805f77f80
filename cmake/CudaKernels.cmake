# gpubench's own CUDA kernels (issue 44: src/train/vocab_loss_kernel.cu, the fused vocabulary
# cross-entropy, src/train/residual_norm_kernel.cu, residual + dropout + LayerNorm, and
# src/train/attention_softmax_kernel.cu, stored attention's masks + softmax + dropout), built
# only where libtorch has CUDA (GPUBENCH_WITH_CUDA, from Dependencies.cmake) and a CUDA compiler
# is found (scripts/setup.sh passes /usr/local/cuda/bin/nvcc when it is there). Elsewhere
# GPUBENCH_CUDA_KERNELS is 0 and each runs its ATen path on CUDA tensors (and its CPU twin on
# the CPU).
#
#   -DCMAKE_CUDA_ARCHITECTURES=90   the GPUs to build for (default: 80 86 89 90)
set(GPUBENCH_CUDA_KERNELS 0)
if(GPUBENCH_WITH_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 86 89 90)
    endif()
    # The runtime libtorch itself loads, not a second static copy of it.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    get_filename_component(_gpubench_root "${CMAKE_CURRENT_LIST_DIR}" DIRECTORY)
    add_library(gpubench_cuda_kernels STATIC ${_gpubench_root}/src/train/vocab_loss_kernel.cu
                                             ${_gpubench_root}/src/train/residual_norm_kernel.cu
                                             ${_gpubench_root}/src/train/attention_softmax_kernel.cu)
    set_target_properties(gpubench_cuda_kernels PROPERTIES
      CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
    target_include_directories(gpubench_cuda_kernels PRIVATE ${_gpubench_root})
    target_link_libraries(gpubench_cuda_kernels PUBLIC CUDA::cudart)
    set(GPUBENCH_CUDA_KERNELS 1)
  else()
    message(STATUS "gpubench: no CUDA compiler: the fused functions run their ATen paths")
  endif()
endif()
message(STATUS "gpubench: own CUDA kernels: ${GPUBENCH_CUDA_KERNELS}")
