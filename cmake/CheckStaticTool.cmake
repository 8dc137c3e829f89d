# Post-build check of one static tool: `file` must say "statically linked",
# no NSS module loader, no iostream, and the stripped size must fit the
# budget. Run with
#   cmake -DTOOL=path [-DBUDGET=bytes -DSIZES=dir] -P CheckStaticTool.cmake
# (without BUDGET, no size check: static-deps-probe).
execute_process(COMMAND file -b ${TOOL} OUTPUT_VARIABLE kind OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT kind MATCHES "statically linked")
  message(FATAL_ERROR "${TOOL} is not statically linked: ${kind}")
endif()
# <iostream> costs about 1 MB of locale machinery in a static binary: printf
# and friends only.
execute_process(COMMAND nm -C ${TOOL} OUTPUT_VARIABLE symbols RESULT_VARIABLE nm_result)
if(NOT nm_result EQUAL 0)
  message(FATAL_ERROR "nm ${TOOL} failed")
endif()
if(symbols MATCHES "std::ios_base::Init::Init")
  message(FATAL_ERROR "${TOOL} links iostream (std::ios_base::Init): keep <iostream> out of the tools")
endif()
# glibc's NSS module loader (it dlopen()s the host's libnss_*.so) must not be
# in a static tool. The link warning catches getpwnam and friends; this also
# catches glibc functions that reach NSS without one (getnameinfo, getlogin).
if(symbols MATCHES "__nss_module_load")
  message(FATAL_ERROR "${TOOL} links glibc's NSS module loader (__nss_module_load): "
                      "something calls NSS; see scripts/static-no-nss.c")
endif()
if(NOT BUDGET)
  message(STATUS "${TOOL}: statically linked, no NSS loader")
  return()
endif()
# The stripped copy goes to SIZES/stripped/, not next to the tool, so that
# the tools directory holds only the tools (the VM tests take them from
# there); SIZES/stripped/ is what an initramfs would ship.
get_filename_component(name ${TOOL} NAME)
file(MAKE_DIRECTORY ${SIZES}/stripped)
execute_process(COMMAND strip -o ${SIZES}/stripped/${name} ${TOOL} RESULT_VARIABLE stripped)
if(NOT stripped EQUAL 0)
  message(FATAL_ERROR "strip ${TOOL} failed")
endif()
file(SIZE ${SIZES}/stripped/${name} size)
file(WRITE ${SIZES}/${name}.size "${size}\n")
if(size GREATER BUDGET)
  message(FATAL_ERROR "${name} is ${size} bytes stripped, over the budget of ${BUDGET}")
endif()
message(STATUS "${name}: ${size} bytes stripped (budget ${BUDGET}), statically linked, no NSS loader")
