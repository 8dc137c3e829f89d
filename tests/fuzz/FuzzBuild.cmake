# Included by the top-level CMakeLists.txt when GPUINIT_FUZZ is ON, in place
# of the normal build: libgpuinit's layers compiled with libFuzzer's coverage
# instrumentation, AddressSanitizer and UndefinedBehaviorSanitizer, and the
# fuzz targets of tests/fuzz linked with libFuzzer. Nothing else (no tools,
# man pages or GoogleTest suites), so configure it in a tree of its own:
#
#   cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang \
#         -DCMAKE_CXX_COMPILER=clang++ -DGPUINIT_FUZZ=ON
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "GPUINIT_FUZZ needs clang (libFuzzer): configure a separate tree with "
                      "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
endif()
if(GPUINIT_STATIC)
  message(FATAL_ERROR "GPUINIT_FUZZ and GPUINIT_STATIC are separate build trees")
endif()

option(GPUINIT_FUZZ_DETECT_LEAKS
       "Fail the fuzz tests on leaks (LeakSanitizer; it cannot run under ptrace)" ON)

# Every object, the library's included: coverage for libFuzzer, and any
# sanitizer report is fatal (-fno-sanitize-recover), so it fails the run.
# _GLIBCXX_ASSERTIONS makes an out-of-range string_view or vector index
# abort, where ASan alone sees nothing (the byte is inside the buffer).
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                    -fno-omit-frame-pointer -D_GLIBCXX_ASSERTIONS)
# Executables that are not fuzz targets (the seed generator) get the
# sanitizer runtimes; the targets add libFuzzer itself (tests/fuzz).
add_link_options(-fsanitize=address,undefined)

# Only the layers the targets link are built (devnodes has no parser of
# untrusted input); `cmake --build build-fuzz --target gpuinit_devnodes`
# builds it, instrumented too.
add_subdirectory(libgpuinit EXCLUDE_FROM_ALL)

enable_testing()
add_subdirectory(tests/fuzz)
