# NVIDIA's nvml.h: every NVML type, constant and signature the project uses
# comes from it (libgpuinit/nvml). NVML itself is dlopened at run time and
# never linked, so the header is all the build needs.
#
# Found in the usual places (a machine with libnvidia-ml-dev or CUDA
# installed), else fetched once per checkout from Debian's libnvidia-ml-dev
# into .cache/nvml-dev by scripts/fetch-nvml-header (the package itself cannot
# be installed without NVIDIA's driver packages; the script says why).
# -DGPUINIT_NVML_INCLUDE_DIR=DIR names a directory holding nvml.h.
find_path(GPUINIT_NVML_INCLUDE_DIR nvml.h
  PATHS /usr/include /usr/local/cuda/include ${PROJECT_SOURCE_DIR}/.cache/nvml-dev/usr/include
  NO_DEFAULT_PATH
  DOC "Directory holding NVIDIA's nvml.h")
if(NOT GPUINIT_NVML_INCLUDE_DIR)
  set(nvml_cache ${PROJECT_SOURCE_DIR}/.cache/nvml-dev)
  execute_process(COMMAND ${PROJECT_SOURCE_DIR}/scripts/fetch-nvml-header ${nvml_cache}
                  RESULT_VARIABLE nvml_result)
  if(NOT nvml_result EQUAL 0)
    message(FATAL_ERROR "nvml.h not found and scripts/fetch-nvml-header failed; install "
                        "libnvidia-ml-dev's nvml.h or pass -DGPUINIT_NVML_INCLUDE_DIR=DIR")
  endif()
  set(GPUINIT_NVML_INCLUDE_DIR ${nvml_cache}/usr/include CACHE PATH
      "Directory holding NVIDIA's nvml.h" FORCE)
endif()
file(STRINGS ${GPUINIT_NVML_INCLUDE_DIR}/nvml.h nvml_api_line
     REGEX "^#define NVML_API_VERSION[ \t]+[0-9]+")
string(REGEX REPLACE ".*NVML_API_VERSION[ \t]+([0-9]+).*" "\\1" nvml_api "${nvml_api_line}")
if(NOT nvml_api OR nvml_api LESS 11)
  message(FATAL_ERROR "${GPUINIT_NVML_INCLUDE_DIR}/nvml.h is NVML API '${nvml_api}'; "
                      "11 (CUDA 11.x) or later is needed")
endif()
message(STATUS "nvml.h: ${GPUINIT_NVML_INCLUDE_DIR} (NVML API ${nvml_api})")
