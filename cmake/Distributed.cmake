# What src/distributed/comm.cpp (data-parallel training, issue 15) needs beyond libtorch:
# - Gloo's headers: libtorch's ProcessGroupGloo.hpp includes gloo/*.h, which Debian ships in
#   libgloo-dev (scripts/setup.sh installs it) and a libtorch archive may ship in its include
#   folder. Debian's libtorch_cpu links libgloo.so.0 itself; linking it here too keeps any gloo
#   symbol the headers' inline code names resolvable. The PyTorch wheel links gloo statically.
# - NCCL's header for ProcessGroupNCCL.hpp on a CUDA libtorch: the wheel does not ship nccl.h,
#   its pip dependency nvidia-nccl does (site-packages/nvidia/nccl/include).
# Nothing found is not an error: the backend is then absent, and gpubench says so at run time
# (`gpubench info`, and `run --gpus` / `--world-size` refuse with the reason).
find_path(GPUBENCH_GLOO_INCLUDE_DIR gloo/algorithm.h PATHS ${TORCH_INCLUDE_DIRS} /usr/include)
find_library(GPUBENCH_GLOO_LIBRARY NAMES gloo PATHS /usr/lib /usr/lib/x86_64-linux-gnu)
set(GPUBENCH_DISTRIBUTED_INCLUDES "")
set(GPUBENCH_DISTRIBUTED_LIBS "")
# A header found in the compiler's own /usr/include needs no include flag; passing that folder as
# -isystem breaks clang's #include_next of the C headers (the sanitizer build is clang).
function(gpubench_add_include dir)
  if(NOT dir MATCHES "^/usr(/local)?/include/?$")
    set(GPUBENCH_DISTRIBUTED_INCLUDES ${GPUBENCH_DISTRIBUTED_INCLUDES} ${dir} PARENT_SCOPE)
  endif()
endfunction()
if(GPUBENCH_GLOO_INCLUDE_DIR)
  gpubench_add_include(${GPUBENCH_GLOO_INCLUDE_DIR})
  if(GPUBENCH_GLOO_LIBRARY)
    list(APPEND GPUBENCH_DISTRIBUTED_LIBS ${GPUBENCH_GLOO_LIBRARY})
  endif()
endif()
if(GPUBENCH_WITH_CUDA)
  set(_nccl_hints "")
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c
              "import glob, os, site; print(';'.join(sorted({os.path.dirname(p) for d in site.getsitepackages() + [site.getusersitepackages()] for p in glob.glob(os.path.join(d, 'nvidia', '**', 'nccl.h'), recursive=True)})))"
      OUTPUT_VARIABLE _nccl_hints OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  find_path(GPUBENCH_NCCL_INCLUDE_DIR nccl.h
            HINTS ${_nccl_hints} $ENV{NCCL_INCLUDE_DIR} $ENV{NCCL_HOME}/include
            PATHS ${TORCH_INCLUDE_DIRS} /usr/include /usr/local/cuda/include)
  if(GPUBENCH_NCCL_INCLUDE_DIR)
    gpubench_add_include(${GPUBENCH_NCCL_INCLUDE_DIR})
  endif()
endif()
message(STATUS "gpubench: data-parallel Gloo headers: ${GPUBENCH_GLOO_INCLUDE_DIR}, "
               "NCCL header: ${GPUBENCH_NCCL_INCLUDE_DIR}")
