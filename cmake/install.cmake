# What `cmake --install` installs (docs/operations.md, "Installing from packages"), in one
# component per Debian package (cmake/package.cmake):
#   client       kiln, the command                                          package kiln
#   coordinator  kiln-coordinator, kiln-qualifier, their configs and units,
#                the alert rules, dashboard and scrape config               package kiln-coordinator
#   agent        kiln-agent and its health check helper, its config, unit   package kiln-agent
#   sim          the simulated chip's and the CPU reference's driver backends,
#                the simulated workloads, kiln-sim-chip, the sim's model set package kiln-sim
# Tests, fuzzers, benchmarks and the simulation tools of the test suite (kiln-sim-sweep,
# kiln-fleet-sim, kiln-bench-detection, kiln-qualification-demo-set) are not installed.

# `cmake --install` installs what was built; it does not build the tests first.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

set(KILN_SYSCONFDIR ${CMAKE_INSTALL_FULL_SYSCONFDIR}/kiln)
# systemd's StateDirectory= and RuntimeDirectory= are always below /var/lib and /run, whatever
# the prefix, so the configs name those.
set(KILN_STATEDIR /var/lib/kiln)
set(KILN_RUNDIR /run/kiln)
set(KILN_DATADIR ${CMAKE_INSTALL_DATADIR}/kiln)
set(KILN_FULL_DATADIR ${CMAKE_INSTALL_FULL_DATADIR}/kiln)
set(KILN_FULL_WORKLOADDIR ${KILN_INSTALL_FULL_PKGLIBDIR}/workloads)
# The group allowed on the agent's local socket, and the user of the coordinator and qualifier.
set(KILN_USER kiln)

if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  pkg_get_variable(kiln_systemd_unit_dir systemd systemdsystemunitdir)
endif()
if(NOT kiln_systemd_unit_dir)
  set(kiln_systemd_unit_dir ${CMAKE_INSTALL_PREFIX}/lib/systemd/system)
endif()
set(KILN_SYSTEMD_UNIT_DIR ${kiln_systemd_unit_dir} CACHE PATH
  "Where the systemd units are installed (default: systemd's own, /lib/systemd/system on Debian 12)")

# The programs, in the component of the package that ships each.
install(TARGETS kiln RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT client)
install(TARGETS kiln-coordinator kiln-qualifier RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT coordinator)
# kiln-agent runs each health check in kiln-agent-check, which it looks for beside itself.
install(TARGETS kiln-agent kiln-agent-check RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT agent)
install(TARGETS kiln-sim-chip RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT sim)
# The backends are loaded with dlopen by path (agent.toml, the unit tier), never linked: a
# private folder, no soname, not executable.
install(TARGETS kiln_sim_driver kiln_cpu_driver
  LIBRARY DESTINATION ${KILN_INSTALL_PKGLIBDIR} COMPONENT sim
  PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
# Workloads are run by the agent by the paths agent.toml's [workloads] gives, not from PATH.
install(TARGETS kiln-workload-smoke kiln-workload-model RUNTIME DESTINATION ${KILN_INSTALL_PKGLIBDIR}/workloads
  COMPONENT sim)
# The risk register lives beside the set it names (docs/risks.md); the workload catalog is the
# qualifier's default workload_catalog.
install(FILES ${KILN_SOURCE_ROOT}/qualification/data/qualification-set.toml
  ${KILN_SOURCE_ROOT}/qualification/data/risks.toml
  ${CMAKE_BINARY_DIR}/share/kiln/sim/workloads.json
  DESTINATION ${KILN_DATADIR}/sim COMPONENT sim)

# What the packages ship, to build before packaging (scripts/package) without the tests.
set(kiln_shipped_targets kiln kiln-coordinator kiln-qualifier kiln-agent kiln-agent-check kiln-sim-chip
  kiln_sim_driver kiln_cpu_driver kiln-workload-smoke kiln-workload-model)
add_custom_target(kiln_shipped)
add_dependencies(kiln_shipped ${kiln_shipped_targets} kiln_sim_workloads_json)
# Linked as Debian links its own packages: relocations resolved at start-up, then read-only.
foreach(target IN LISTS kiln_shipped_targets)
  target_link_options(${target} PRIVATE -Wl,-z,relro -Wl,-z,now)
endforeach()

# A manual page per program on the PATH, made from its --help by help2man (scripts/setup
# installs it): section 1 for commands, 8 for the daemons and the agent's helper.
find_program(KILN_HELP2MAN help2man)
if(NOT KILN_HELP2MAN)
  message(STATUS "help2man not found, so no manual pages are installed; scripts/setup installs it")
endif()
function(kiln_man_page program section component name)
  if(NOT KILN_HELP2MAN)
    return()
  endif()
  set(page ${CMAKE_BINARY_DIR}/packaging/man/${program}.${section})
  # Run by name from PATH, so that the page's usage line says `kiln`, not build/bin/kiln.
  add_custom_command(OUTPUT ${page}.gz
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/packaging/man
    COMMAND ${CMAKE_COMMAND} -E env PATH=$<TARGET_FILE_DIR:${program}>:/usr/bin:/bin
            ${KILN_HELP2MAN} --no-info --no-discard-stderr --section=${section} --name=${name}
            --include=${KILN_SOURCE_ROOT}/scripts/packaging/man/see-also.h2m --output=${page} ${program}
    COMMAND gzip -9 --no-name --force ${page}
    DEPENDS ${program} ${KILN_SOURCE_ROOT}/scripts/packaging/man/see-also.h2m
    COMMENT "Manual page ${program}(${section})"
    VERBATIM)
  add_custom_target(kiln_man_${program} ALL DEPENDS ${page}.gz)
  add_dependencies(kiln_shipped kiln_man_${program})
  install(FILES ${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section} COMPONENT ${component})
endfunction()
kiln_man_page(kiln 1 client "the kiln command: leases, jobs, qualification runs, releases, keys")
kiln_man_page(kiln-sim-chip 1 sim "inject, clear and show faults on kiln's simulated chips")
kiln_man_page(kiln-coordinator 8 coordinator "the kiln fleet coordinator")
kiln_man_page(kiln-qualifier 8 coordinator "drives kiln's qualification runs")
kiln_man_page(kiln-agent 8 agent "the kiln agent of an accelerator host")
kiln_man_page(kiln-agent-check 8 agent "runs one health check of a chip for kiln-agent")

# The default configs and the units name the installed paths of this configure.
set(kiln_packaging_source ${KILN_SOURCE_ROOT}/scripts/packaging)
set(kiln_packaging_binary ${CMAKE_BINARY_DIR}/packaging)
foreach(config coordinator.toml qualifier.toml agent.toml client.toml)
  configure_file(${kiln_packaging_source}/config/${config}.in ${kiln_packaging_binary}/config/${config} @ONLY)
endforeach()
foreach(unit kiln-coordinator.service kiln-qualifier.service kiln-agent.service)
  configure_file(${kiln_packaging_source}/systemd/${unit}.in ${kiln_packaging_binary}/systemd/${unit} @ONLY)
endforeach()

# A config is installed only where there is none: `cmake --install` over an installation keeps
# the operator's edits (the packages mark the same files as conffiles instead).
function(kiln_install_config name component)
  set(installed "${KILN_SYSCONFDIR}/${name}")
  install(CODE "
    if(EXISTS \"\$ENV{DESTDIR}${installed}\")
      message(STATUS \"Kept: \$ENV{DESTDIR}${installed} (an installed config is never replaced)\")
    else()
      file(INSTALL DESTINATION \"${KILN_SYSCONFDIR}\" TYPE FILE
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
        FILES \"${kiln_packaging_binary}/config/${name}\")
    endif()" COMPONENT ${component})
endfunction()
kiln_install_config(coordinator.toml coordinator)
kiln_install_config(qualifier.toml coordinator)
kiln_install_config(agent.toml agent)

install(FILES ${kiln_packaging_binary}/systemd/kiln-coordinator.service
              ${kiln_packaging_binary}/systemd/kiln-qualifier.service
  DESTINATION ${KILN_SYSTEMD_UNIT_DIR} COMPONENT coordinator)
install(FILES ${kiln_packaging_binary}/systemd/kiln-agent.service
  DESTINATION ${KILN_SYSTEMD_UNIT_DIR} COMPONENT agent)

# The alert rules, their tests, the dashboard and an example scrape config, for the host that
# runs Prometheus and Grafana (docs/operations.md, "Alerts and the dashboard").
install(DIRECTORY ${KILN_SOURCE_ROOT}/monitoring/ DESTINATION ${KILN_DATADIR}/monitoring COMPONENT coordinator)

# client.toml has no system-wide place (kiln reads --config, $KILN_CONFIG or
# ~/.config/kiln/client.toml): an example to copy.
install(FILES ${kiln_packaging_binary}/config/client.toml
  DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples COMPONENT client)
