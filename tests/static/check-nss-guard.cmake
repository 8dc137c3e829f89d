# Builds the nss_canary target and passes only when its link fails with
# glibc's NSS warning: the static build's guard against NSS is live.
#   cmake -DBUILD_DIR=dir -P check-nss-guard.cmake
execute_process(
  COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target nss_canary
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(result EQUAL 0)
  message(FATAL_ERROR "nss_canary linked: the NSS warning is not fatal in the static build")
endif()
if(NOT output MATCHES "statically linked applications requires at runtime")
  message(FATAL_ERROR "nss_canary failed for another reason than NSS:\n${output}")
endif()
message(STATUS "the link of a getgrnam caller fails on the NSS warning, as it must")
