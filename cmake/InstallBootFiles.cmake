# Runs at install time (initscripts/CMakeLists.txt sets the GPUINIT_*
# variables): renders the boot files for this install's prefix and installs
# them where init, systemd, udev and initramfs-tools look.
set(prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" prefix "${prefix}")
set(SBINDIR "${prefix}/${GPUINIT_SBINDIR_REL}")
if(prefix STREQUAL "/usr")
  set(SYSCONFDIR /etc)
  set(unitdir "${GPUINIT_PC_UNITDIR}")
  set(sysusersdir "${GPUINIT_PC_SYSUSERSDIR}")
  set(udevdir "${GPUINIT_PC_UDEVDIR}")
else()
  set(SYSCONFDIR "${prefix}/etc")
  set(unitdir "")
  set(sysusersdir "")
  set(udevdir "")
  message(WARNING "gpuinit: the boot files went under ${prefix}, where SysV init, udev and "
                  "initramfs-tools do not look (systemd reads ${prefix}/lib/systemd/system); "
                  "install with --prefix /usr for a working boot")
endif()
if(NOT unitdir)
  set(unitdir "${prefix}/lib/systemd/system")
endif()
if(NOT sysusersdir)
  set(sysusersdir "${prefix}/lib/sysusers.d")
endif()
if(NOT udevdir)
  set(udevdir "${prefix}/lib/udev")
endif()

set(src "${GPUINIT_SOURCE_DIR}")
# One staging directory per destination: installs of this build into
# different DESTDIRs run at once (the VM tests do), and a shared one was
# removed under another install's feet.
string(SHA256 destination_key "$ENV{DESTDIR}|${CMAKE_INSTALL_PREFIX}")
string(SUBSTRING "${destination_key}" 0 16 destination_key)
set(staging "${GPUINIT_STAGING_DIR}/${destination_key}")
file(REMOVE_RECURSE "${staging}")

# render(SOURCE NAME DESTINATION PERMISSIONS...)
function(render source name destination)
  configure_file("${src}/${source}" "${staging}/${destination}/${name}" @ONLY)
  file(INSTALL "${staging}/${destination}/${name}" DESTINATION "${destination}"
       FILE_PERMISSIONS ${ARGN})
endfunction()

set(exec OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
set(data OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
render(initscripts/gpu-restriction gpu-restriction "${SYSCONFDIR}/init.d" ${exec})
render(initscripts/systemd/gpu-restriction.service gpu-restriction.service "${unitdir}" ${data})
render(initscripts/systemd/gpu-persist.service gpu-persist.service "${unitdir}" ${data})
render(initscripts/systemd/gpu-mig.service gpu-mig.service "${unitdir}" ${data})
render(initscripts/systemd/gpu-limit-daemon.service gpu-limit-daemon.service "${unitdir}" ${data})
render(initscripts/gpu-limit-daemon gpu-limit-daemon "${SYSCONFDIR}/init.d" ${exec})
render(initscripts/systemd/gpuinit-status.service gpuinit-status.service "${unitdir}" ${data})
render(initscripts/systemd/gpuinit-status.timer gpuinit-status.timer "${unitdir}" ${data})
render(initscripts/gpuinit-status.cron gpuinit-status "${SYSCONFDIR}/cron.d" ${data})
render(initscripts/systemd/gpu-persist.sysusers.conf gpu-persist.conf "${sysusersdir}" ${data})
render(udev/71-gpu-restriction.rules 71-gpu-restriction.rules "${udevdir}/rules.d" ${data})
render(initscripts/initramfs-tools/gpu-restriction gpu-restriction
       "${prefix}/share/initramfs-tools/hooks" ${exec})

# The admin's settings survive a reinstall: an existing file is kept.
set(defaults "${SYSCONFDIR}/default/gpu-restriction")
if(EXISTS "$ENV{DESTDIR}${defaults}")
  message(STATUS "Keeping: $ENV{DESTDIR}${defaults} (the new defaults are in "
                 "${src}/initscripts/gpu-restriction.default)")
else()
  render(initscripts/gpu-restriction.default gpu-restriction "${SYSCONFDIR}/default" ${data})
endif()

# Nothing of this install stays in the build tree.
file(REMOVE_RECURSE "${staging}")
