# Fails when a freestanding archive (the limit core, which libgpulimit.so
# links into foreign processes) references the heap or the C++ runtime:
# operator new and delete, malloc and friends, exceptions and RTTI
# (__cxa_*, __gxx_personality_v0, typeinfo), or any std:: function that
# lives in libstdc++ rather than in a header.
#   cmake -DARCHIVE=libgpuinit_limit_core.a -DNM=nm -P CheckFreestanding.cmake
if(NOT ARCHIVE OR NOT NM)
  message(FATAL_ERROR "CheckFreestanding: give -DARCHIVE=... and -DNM=...")
endif()
execute_process(COMMAND ${NM} -u --format=posix ${ARCHIVE}
                OUTPUT_VARIABLE undefined RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "CheckFreestanding: ${NM} ${ARCHIVE} failed")
endif()
string(REPLACE "\n" ";" lines "${undefined}")
set(bad "")
foreach(line IN LISTS lines)
  string(REGEX REPLACE " .*" "" symbol "${line}")
  if(symbol MATCHES "^(_Znw|_Zna|_Zdl|_Zda|__cxa_|__gxx_personality|_ZTI|_ZTS|_ZTV|_ZNSt|_ZSt|_ZNKSt|_Unwind_)"
     OR symbol MATCHES "^(malloc|calloc|realloc|free|aligned_alloc|posix_memalign|memalign|strdup|strndup)$")
    list(APPEND bad ${symbol})
  endif()
endforeach()
if(bad)
  list(REMOVE_DUPLICATES bad)
  list(JOIN bad ", " shown)
  message(FATAL_ERROR "${ARCHIVE} is not freestanding: it references ${shown}. The limit "
                      "core is linked into foreign processes (libgpulimit.so): no heap, no "
                      "exceptions, no RTTI, no libstdc++ runtime; move the code to the tool side "
                      "(libgpuinit/limit) or write it without them")
endif()
