# Rule 9 of docs/architecture.md, checked at configure time: each tool main
# (tools/*.cpp) parses options, calls the library, renders and returns an exit
# code. A main past the line budget, or one that opens files, forks or loads
# libraries itself, holds logic that belongs in libgpuinit, where it is tested
# without the tool and shared by the static and dynamic builds.
#
# Usage: include() it and call gpuinit_check_thin_tools(DIR), or run it as a
# script: cmake -DTOOLS_DIR=DIR -P CheckThinTools.cmake (tests/lint does, on a
# fixture that must fail).
# A main's usage text and option table grow with its commands: gpu-mig's seven
# commands take 592 lines with nothing else in them. Logic does not fit.
set(GPUINIT_TOOL_LINE_BUDGET 600)
# Effects a main must leave to the library: raw opens (the Sysroot and SafeDir
# do them), processes (base's run_program), and dynamic loading (nvml).
set(GPUINIT_TOOL_FORBIDDEN
    "(^|[^_A-Za-z0-9])::open(at)?[ \t]*\\("
    "(^|[^_A-Za-z0-9])v?fork[ \t]*\\("
    "(^|[^_A-Za-z0-9])clone3?[ \t]*\\("
    "posix_spawnp?[ \t]*\\("
    "(^|[^_A-Za-z0-9])exec[lv]p?e?[ \t]*\\("
    "dlopen[ \t]*\\("
    "dlsym[ \t]*\\(")

function(gpuinit_check_thin_tools dir)
  cmake_policy(PUSH)
  cmake_policy(SET CMP0007 NEW)
  file(GLOB mains LIST_DIRECTORIES false "${dir}/*.cpp")
  set(failures "")
  foreach(main IN LISTS mains)
    get_filename_component(name "${main}" NAME)
    file(READ "${main}" text)
    string(REGEX MATCHALL "\n" newlines "${text}")
    list(LENGTH newlines count)
    file(STRINGS "${main}" lines)
    if(count GREATER GPUINIT_TOOL_LINE_BUDGET)
      string(APPEND failures "\n  tools/${name}: ${count} lines, over the budget of "
             "${GPUINIT_TOOL_LINE_BUDGET}: move the logic into libgpuinit")
    endif()
    set(number 0)
    foreach(line IN LISTS lines)
      math(EXPR number "${number} + 1")
      # The rule is about code: a comment may name what it forbids.
      string(REGEX REPLACE "//.*$" "" code "${line}")
      foreach(pattern IN LISTS GPUINIT_TOOL_FORBIDDEN)
        if(code MATCHES "${pattern}")
          string(STRIP "${line}" shown)
          string(APPEND failures "\n  tools/${name}:${number}: ${shown}: a main does "
                 "not open, spawn or load; call the library")
        endif()
      endforeach()
    endforeach()
  endforeach()
  cmake_policy(POP)
  if(failures)
    message(FATAL_ERROR "thin tools (docs/architecture.md, rule 9):${failures}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED TOOLS_DIR)
  gpuinit_check_thin_tools("${TOOLS_DIR}")
endif()
