# The Debian packages, built by CPack from the install components of cmake/install.cmake
# (scripts/package; docs/operations.md, "Installing from packages"):
#   kiln              the client                  (component client)
#   kiln-coordinator  coordinator and qualifier   (component coordinator)
#   kiln-agent        the agent                   (component agent)
#   kiln-sim          the simulated chip          (component sim)

set(KILN_PACKAGE_MAINTAINER "kiln maintainers <kiln-maintainers@example.com>" CACHE STRING
  "The Maintainer of the Debian packages and their changelog: NAME <EMAIL>")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kiln)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${KILN_PACKAGE_MAINTAINER}")
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL client coordinator agent sim)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SOURCE kiln)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends on the shared libraries the programs link, as dpkg-shlibdeps finds them.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
# Everything under one staging root, /etc and /lib/systemd included.
set(CPACK_SET_DESTDIR ON)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})

set(kiln_same_version "(= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_CLIENT_PACKAGE_NAME kiln)
set(CPACK_DEBIAN_CLIENT_PACKAGE_RECOMMENDS "git")
set(CPACK_DEBIAN_CLIENT_PACKAGE_SUGGESTS "kiln-sim ${kiln_same_version}")
set(CPACK_COMPONENT_CLIENT_DESCRIPTION "model CI for in-house AI accelerators: the kiln command
kiln qualifies models on in-house accelerators: a coordinator leases nodes
and keeps every result, an agent on each accelerator host owns its chips,
and people and CI use this command. It leases chips, submits jobs and
qualification runs (smoke, nightly, release), shows nodes, jobs, runs and
tickets, releases bundles through the environments repository (with git),
and makes the CURVE keys every kiln program authenticates with (kiln
keygen).")

set(CPACK_DEBIAN_COORDINATOR_PACKAGE_NAME kiln-coordinator)
set(CPACK_DEBIAN_COORDINATOR_PACKAGE_DEPENDS "kiln ${kiln_same_version}, adduser")
# The qualifier's default model set, its unit tier and the sim's bundle builder are the
# simulated chip's; the coordinator reads the environments repository with git.
set(CPACK_DEBIAN_COORDINATOR_PACKAGE_RECOMMENDS "kiln-sim ${kiln_same_version}, git")
set(CPACK_DEBIAN_COORDINATOR_PACKAGE_SUGGESTS "prometheus, grafana")
set(CPACK_COMPONENT_COORDINATOR_DESCRIPTION "model CI for in-house AI accelerators: coordinator and qualifier
kiln-coordinator leases accelerator nodes by priority, preempts experiments
with notice, dispatches jobs to the agents and keeps every node, job, lease
and result in SQLite. kiln-qualifier drives the qualification runs
(presubmit smoke, nightly, release): it compares every model against the
accepted baseline, bisects a regression to its change and files a ticket to
the team that owns it. Both run as the kiln user under hardened systemd
units; the package also ships Prometheus alert rules and a Grafana dashboard
for them.")

set(CPACK_DEBIAN_AGENT_PACKAGE_NAME kiln-agent)
set(CPACK_DEBIAN_AGENT_PACKAGE_DEPENDS "kiln ${kiln_same_version}, adduser")
# Its default agent.toml runs the simulated chip; a real chip's driver replaces it.
set(CPACK_DEBIAN_AGENT_PACKAGE_RECOMMENDS "kiln-sim ${kiln_same_version}")
set(CPACK_COMPONENT_AGENT_DESCRIPTION "model CI for in-house AI accelerators: the agent of an accelerator host
kiln-agent owns the chips of its host through their driver: it runs health
probes and diagnostics, installs firmware and drivers with rollback, runs
jobs and benchmarks in cgroups of their own under hard deadlines, and
reports to the kiln coordinator over CURVE-encrypted ZeroMQ. It runs as
root: it is the host's privileged owner of the chips.")

set(CPACK_DEBIAN_SIM_PACKAGE_NAME kiln-sim)
set(CPACK_DEBIAN_SIM_PACKAGE_SECTION devel)
set(CPACK_COMPONENT_SIM_DESCRIPTION "model CI for in-house AI accelerators: the simulated chip
kiln-sim is kiln without an accelerator: the simulated chip behind kiln's
driver ABI (libkiln_sim_driver.so, with its performance and noise model and
injectable faults), the CPU reference backend of the unit tier
(libkiln_cpu_driver.so), the workloads that run on them (kiln-workload-
smoke, kiln-workload-model), the models' qualification set, and kiln-sim-
chip to inject and clear faults on simulated chips.")

# The conffiles and maintainer scripts of the packages with daemons: kiln-coordinator and
# kiln-agent (scripts/packaging/debian/*.in, configured per package).
set(kiln_debian_source ${KILN_SOURCE_ROOT}/scripts/packaging/debian)
function(kiln_debian_control component package)
  cmake_parse_arguments(D "" "" "CONFFILES;STATE_DIRS;KEY_PAIRS;UNITS_ENABLED;UNITS_DISABLED" ${ARGN})
  set(dir ${CMAKE_BINARY_DIR}/packaging/debian/${package})
  set(KILN_DEB_PACKAGE ${package})
  list(JOIN D_STATE_DIRS " " KILN_DEB_STATE_DIRS)
  list(JOIN D_KEY_PAIRS " " KILN_DEB_KEY_PAIRS)
  list(JOIN D_UNITS_ENABLED " " KILN_DEB_UNITS_ENABLED)
  list(JOIN D_UNITS_DISABLED " " KILN_DEB_UNITS_DISABLED)
  list(TRANSFORM D_CONFFILES PREPEND "${KILN_SYSCONFDIR}/")
  list(JOIN D_CONFFILES "\n" conffiles)
  file(CONFIGURE OUTPUT ${dir}/conffiles CONTENT "${conffiles}\n")
  foreach(script postinst prerm postrm)
    configure_file(${kiln_debian_source}/${script}.in ${dir}/${script} @ONLY)
  endforeach()
  string(TOUPPER ${component} upper)
  set(CPACK_DEBIAN_${upper}_PACKAGE_CONTROL_EXTRA ${dir}/conffiles ${dir}/postinst ${dir}/prerm ${dir}/postrm
    PARENT_SCOPE)
endfunction()
kiln_debian_control(coordinator kiln-coordinator
  CONFFILES coordinator.toml qualifier.toml
  STATE_DIRS ${KILN_USER}:${KILN_STATEDIR}/coordinator ${KILN_USER}:${KILN_STATEDIR}/qualifier
             ${KILN_USER}:${KILN_STATEDIR}/qualifier/bundles ${KILN_USER}:${KILN_STATEDIR}/qualifier/golden
             ${KILN_USER}:${KILN_STATEDIR}/qualifier/tickets
  KEY_PAIRS ${KILN_USER}:${KILN_SYSCONFDIR}/coordinator ${KILN_USER}:${KILN_SYSCONFDIR}/qualifier
  # The coordinator serves on loopback with the packaged config; the qualifier needs the
  # models' golden references first.
  UNITS_ENABLED kiln-coordinator.service
  UNITS_DISABLED kiln-qualifier.service)
kiln_debian_control(agent kiln-agent
  CONFFILES agent.toml
  STATE_DIRS root:${KILN_STATEDIR}/agent
  KEY_PAIRS root:${KILN_SYSCONFDIR}/agent
  # It needs its node's name, the coordinator's address and key, and its key listed there.
  UNITS_DISABLED kiln-agent.service)

# Every package's /usr/share/doc/PACKAGE: the copyright and a Debian changelog. Installed only
# for the packages (EXCLUDE_FROM_ALL: CPack asks for each component by name).
string(TIMESTAMP kiln_changelog_date "%a, %d %b %Y 00:00:00 +0000" UTC)
configure_file(${kiln_debian_source}/changelog.in ${CMAKE_BINARY_DIR}/packaging/debian/changelog @ONLY)
execute_process(COMMAND gzip -9 --no-name --stdout ${CMAKE_BINARY_DIR}/packaging/debian/changelog
  OUTPUT_FILE ${CMAKE_BINARY_DIR}/packaging/debian/changelog.gz COMMAND_ERROR_IS_FATAL ANY)
foreach(component_package client:kiln coordinator:kiln-coordinator agent:kiln-agent sim:kiln-sim)
  string(REPLACE ":" ";" pair ${component_package})
  list(GET pair 0 component)
  list(GET pair 1 package)
  install(FILES ${kiln_debian_source}/copyright ${CMAKE_BINARY_DIR}/packaging/debian/changelog.gz
    DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package} COMPONENT ${component} EXCLUDE_FROM_ALL)
endforeach()

include(CPack)
