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
# One staging directory per destination: installs of this build into
# different DESTDIRs run at once (the VM tests do), and a shared one was
# removed under another install's feet.
string(SHA256 destination_key "$ENV{DESTDIR}|${CMAKE_INSTALL_PREFIX}")
string(SUBSTRING "${destination_key}" 0 16 destination_key)
set(staging "${GPUINIT_OCI_STAGING}/${destination_key}")
file(REMOVE_RECURSE "${staging}")
foreach(entry "hooks.d/gpu-limit-precreate.json;containers/oci/hooks.d"
              "hooks.d/gpu-limit-poststop.json;containers/oci/hooks.d"
              "docker-daemon.json;gpuinit"
              "containerd-runtime.toml;gpuinit"
              "runtimeclass.yaml;gpuinit")
  list(GET entry 0 source)
  list(GET entry 1 destination)
  get_filename_component(name "${source}" NAME)
  configure_file("${GPUINIT_OCI_SOURCE}/${source}.in" "${staging}/${name}" @ONLY)
  file(INSTALL "${staging}/${name}" DESTINATION "${datadir}/${destination}"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
endforeach()

# Nothing of this install stays in the build tree.
file(REMOVE_RECURSE "${staging}")
