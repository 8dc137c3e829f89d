# GPUINIT_STATIC=ON: the tools are one multi-call binary linked fully
# static against libkmod.a, libpci.a, libudev.a (built from Debian's sources
# by scripts/build-static-deps.sh, cached in the build tree) and libcap-ng.a.
set(GPUINIT_STATIC_DEPS "${PROJECT_BINARY_DIR}/static-deps" CACHE PATH
    "Where scripts/build-static-deps.sh puts the static archives")
# gpu-mig apply (issue 27: the layout, its plan, the nvidia-smi control and
# parsers, the command) took it from 2,059,272 to 2,165,928 stripped bytes
# (docs/static-build.md). Issue 29 (gpuinit status, the NVreg option check,
# --explain, names through getent) took it to 2,264,808.
set(GPUINIT_MULTICALL_BUDGET 2269184 CACHE STRING
    "Largest stripped static multi-call binary (every tool), in bytes (2216 KiB)")

# Every configure runs the script: it returns at once when its cache matches
# its recipe, and rebuilds when the script or the NSS stand-ins changed
# (which also re-runs this configure).
set(deps_script ${PROJECT_SOURCE_DIR}/scripts/build-static-deps.sh)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  ${deps_script} ${PROJECT_SOURCE_DIR}/scripts/static-no-nss.c)
execute_process(COMMAND ${deps_script} ${GPUINIT_STATIC_DEPS} RESULT_VARIABLE deps_result)
if(NOT deps_result EQUAL 0)
  message(FATAL_ERROR "scripts/build-static-deps.sh failed (${deps_result})")
endif()

foreach(library kmod pci udev cap-ng gpuinit-nonss)
  add_library(gpuinit::${library} STATIC IMPORTED)
  set_target_properties(gpuinit::${library} PROPERTIES
    IMPORTED_LOCATION "${GPUINIT_STATIC_DEPS}/lib/lib${library}.a"
    INTERFACE_INCLUDE_DIRECTORIES "${GPUINIT_STATIC_DEPS}/include")
endforeach()
# The archives' NSS calls are renamed to stand-ins in libgpuinit-nonss.a.
set_target_properties(gpuinit::cap-ng PROPERTIES INTERFACE_LINK_LIBRARIES gpuinit::gpuinit-nonss)
set_target_properties(gpuinit::udev PROPERTIES
  INTERFACE_LINK_LIBRARIES gpuinit::gpuinit-nonss INTERFACE_LINK_OPTIONS "-pthread")

# -Os (after the build type's -O2, so it wins) trims 125-150 KB off each
# tool; the static tools are size-budgeted boot tools, and the benchmarks
# run against the dynamic build. -fno-exceptions -fno-rtti drop the landing
# pads and type info (78 KB and 4 KB of the multi-call binary): nothing in
# gpuinit throws or catches (errors are Result values), so a throw from the
# standard library (bad_alloc) ends the program with or without them.
add_compile_options(-Os -ffunction-sections -fdata-sections
                    "$<$<COMPILE_LANGUAGE:CXX>:-fno-exceptions;-fno-rtti>")
# --fatal-warnings turns glibc's "Using 'getgrnam' in statically linked
# applications requires at runtime the shared libraries..." into a build
# failure: a static tool must never load NSS modules.
add_link_options(-static -Wl,--gc-sections -Wl,--fatal-warnings)
