# Runs at install time (oci/CMakeLists.txt sets the GPUINIT_* variables).
set(prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" prefix "${prefix}")
if(IS_ABSOLUTE "${GPUINIT_SBINDIR_REL}")
  set(SBINDIR "${GPUINIT_SBINDIR_REL}")
else()
  set(SBINDIR "${prefix}/${GPUINIT_SBINDIR_REL}")
endif()
if(IS_ABSOLUTE "${GPUINIT_DATADIR_REL}")
  set(datadir "${GPUINIT_DATADIR_REL}")
else()
  set(datadir "${prefix}/${GPUINIT_DATADIR_REL}")
endif()
file(REMOVE_RECURSE "${GPUINIT_OCI_STAGING}")
foreach(entry "hooks.d/gpu-limit-precreate.json;containers/oci/hooks.d"
              "hooks.d/gpu-limit-poststop.json;containers/oci/hooks.d"
              "docker-daemon.json;gpuinit"
              "containerd-runtime.toml;gpuinit"
              "runtimeclass.yaml;gpuinit")
  list(GET entry 0 source)
  list(GET entry 1 destination)
  get_filename_component(name "${source}" NAME)
  configure_file("${GPUINIT_OCI_SOURCE}/${source}.in" "${GPUINIT_OCI_STAGING}/${name}" @ONLY)
  file(INSTALL "${GPUINIT_OCI_STAGING}/${name}" DESTINATION "${datadir}/${destination}"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
endforeach()
