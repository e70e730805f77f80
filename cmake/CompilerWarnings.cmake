# Warnings apply to our own targets only; imported targets' headers are system headers.
function(gpubench_set_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter
                           -Wno-missing-field-initializers)
  endif()
endfunction()
