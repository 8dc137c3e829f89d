# Writes libgpulimit.so's version script from src/entry_points.def, at build
# time, so that the exports cannot drift from the list of hooks:
#   cmake -DDEF=entry_points.def -DOUT=gpulimit.map -DGLIBC_OLD=GLIBC_2.2.5 -P gpulimit-map.cmake
#
# - GPULIMIT_1: every GPULIMIT_CUDA_HOOK and GPULIMIT_NVML_HOOK name, by
#   exported ABI name. libcuda's own exports are unversioned; an unversioned
#   reference (a program linked against libcuda, dlsym) binds to a default
#   version of any name, so ours are found exactly as libcuda's would be.
# - dlsym in two versions, as glibc exports it: GLIBC_OLD (the port's first
#   version: what programs linked against glibc < 2.34 reference, in
#   libdl.so.2) and GLIBC_2.34 (the default since libdl moved into libc).
#   resolve.cpp binds the two to its entry with .symver; the nodes only have
#   to exist here. A version node named like glibc's is matched by name
#   alone, which is what lets our dlsym interpose glibc's.
# - everything else local.
file(STRINGS "${DEF}" lines REGEX "^GPULIMIT_(CUDA|NVML)_HOOK\\(")
set(hooks "")
foreach(line IN LISTS lines)
  if(NOT line MATCHES "^GPULIMIT_(CUDA|NVML)_HOOK\\(([A-Za-z_][A-Za-z0-9_]*),")
    message(FATAL_ERROR "${DEF}: cannot read the hook name in: ${line}")
  endif()
  string(APPEND hooks "    ${CMAKE_MATCH_2};\n")
endforeach()
if(hooks STREQUAL "")
  message(FATAL_ERROR "${DEF}: no GPULIMIT_*_HOOK line")
endif()
set(text "/* Generated from ${DEF} by gpulimit-map.cmake: do not edit. */
${GLIBC_OLD} {
  global:
    dlsym;
};
GLIBC_2.34 {
  global:
    dlsym;
} ${GLIBC_OLD};
GPULIMIT_1 {
  global:
${hooks}  local:
    *;
};
")
# Rewrite only on change, so that an unchanged list does not relink.
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL text)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${text}")
