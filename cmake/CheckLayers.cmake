# The layering rule of docs/architecture.md, checked at configure time: a
# layer may link only the layers listed for it below (and third-party
# libraries), never one above it. The per-layer include directories enforce
# the same at compile time.
set(GPUINIT_ALLOWED_base "")
set(GPUINIT_ALLOWED_nvml "base")
set(GPUINIT_ALLOWED_fs "base")
set(GPUINIT_ALLOWED_host "fs;base")
set(GPUINIT_ALLOWED_devnodes "host;fs;base")
set(GPUINIT_ALLOWED_modules "host;fs;base")
set(GPUINIT_ALLOWED_service "fs;base")
set(GPUINIT_ALLOWED_persist "service;host;fs;base")
set(GPUINIT_ALLOWED_mig "devnodes;host;nvml;fs;base")
set(GPUINIT_ALLOWED_limit_core "")
set(GPUINIT_ALLOWED_limit "limit_core;service;nvml;fs;base")
set(GPUINIT_ALLOWED_status "devnodes;modules;persist;mig;limit;limit_core;service;nvml;host;fs;base")

function(gpuinit_check_layers)
  get_property(layers GLOBAL PROPERTY GPUINIT_LAYERS)
  foreach(layer IN LISTS layers)
    if(NOT DEFINED GPUINIT_ALLOWED_${layer})
      message(FATAL_ERROR "layer ${layer} is not in cmake/CheckLayers.cmake: "
                          "add it there and to docs/architecture.md")
    endif()
    get_target_property(links gpuinit_${layer} LINK_LIBRARIES)
    get_target_property(interface_links gpuinit_${layer} INTERFACE_LINK_LIBRARIES)
    foreach(link IN LISTS links interface_links)
      if(link MATCHES "^gpuinit_(.+)$")
        set(other ${CMAKE_MATCH_1})
        if(NOT other IN_LIST GPUINIT_ALLOWED_${layer})
          message(FATAL_ERROR "layering: gpuinit_${layer} links gpuinit_${other}, which "
                              "docs/architecture.md does not allow (allowed: "
                              "${GPUINIT_ALLOWED_${layer}})")
        endif()
      elseif(layer STREQUAL "base" AND link AND NOT link MATCHES "^\\$<")
        message(FATAL_ERROR "layering: gpuinit_base links ${link}; base takes no "
                            "third-party library (the limiter links it)")
      endif()
    endforeach()
  endforeach()
endfunction()
