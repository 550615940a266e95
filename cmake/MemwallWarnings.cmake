# Warnings for memwall's own targets: strict, and errors in every build type.
# Third-party headers come in as SYSTEM includes (imported targets), so they are not affected.
function(memwall_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
      -Wcast-align -Wunused -Woverloaded-virtual -Wnull-dereference -Wdouble-promotion -Wformat=2
      -Wimplicit-fallthrough -Werror
      # g++ 12 reports false -Wrestrict errors inside std::string for "literal" + std::string (GCC bug 105651).
      $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>>)
endfunction()
