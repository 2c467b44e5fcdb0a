# Production code never links the simulator: a target outside sim/, tests/ and fuzz/ that links a target
# defined under sim/, directly or through any other target, stops the configure. A target that
# must (a demo tool, the kiln client's default workload catalog) says why in its
# KILN_MAY_LINK_SIM property.

function(kiln_targets_under directory out)
  get_property(targets DIRECTORY ${directory} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirectories DIRECTORY ${directory} PROPERTY SUBDIRECTORIES)
  foreach(subdirectory IN LISTS subdirectories)
    kiln_targets_under(${subdirectory} below)
    list(APPEND targets ${below})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# The project's targets `target` links, directly or not (imported and plain libraries left out).
function(kiln_linked_targets target out)
  set(seen "")
  set(pending ${target})
  while(pending)
    list(POP_FRONT pending current)
    set(links "")
    foreach(property LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(values ${current} ${property})
      if(values)
        list(APPEND links ${values})
      endif()
    endforeach()
    foreach(link IN LISTS links)
      # $<LINK_ONLY:x> carries a static library's private links; ::@(...) marks the directory
      # a link was added from.
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" link "${link}")
      string(REGEX REPLACE "::@\\(.*\\)$" "" link "${link}")
      if(link STREQUAL "" OR NOT TARGET ${link} OR link IN_LIST seen)
        continue()
      endif()
      get_target_property(imported ${link} IMPORTED)
      if(imported)
        continue()
      endif()
      list(APPEND seen ${link})
      list(APPEND pending ${link})
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

function(kiln_check_sim_boundary)
  kiln_targets_under(${CMAKE_SOURCE_DIR} targets)
  set(sim_targets "")
  set(production_targets "")
  foreach(target IN LISTS targets)
    get_target_property(directory ${target} SOURCE_DIR)
    file(RELATIVE_PATH relative ${CMAKE_SOURCE_DIR} ${directory})
    if(relative MATCHES "^sim(/|$)")
      list(APPEND sim_targets ${target})
    elseif(NOT relative MATCHES "^(tests|fuzz)(/|$)")
      list(APPEND production_targets ${target})
    endif()
  endforeach()
  set(violations "")
  foreach(target IN LISTS production_targets)
    get_target_property(allowed ${target} KILN_MAY_LINK_SIM)
    if(allowed)
      continue()
    endif()
    kiln_linked_targets(${target} linked)
    foreach(link IN LISTS linked)
      if(link IN_LIST sim_targets)
        list(APPEND violations "${target} links the sim target ${link}")
      endif()
    endforeach()
  endforeach()
  if(violations)
    list(JOIN violations "\n  " text)
    message(FATAL_ERROR "production targets link the simulator:\n  ${text}\n"
                        "Give production code what it needs from the sim as data or an interface it "
                        "implements (docs/architecture.md), or, for a demo tool, set the target's "
                        "KILN_MAY_LINK_SIM property to the reason.")
  endif()
endfunction()

# The coordinator stays thin: it keeps and validates qualification records (kiln_records) but
# never links the qualification domain, whose runs, gates and bisections belong to kiln-qualifier.
function(kiln_check_thin_coordinator)
  kiln_linked_targets(kiln-coordinator linked)
  foreach(domain kiln_qualification kiln_release kiln_cli)
    if(domain IN_LIST linked)
      message(FATAL_ERROR "kiln-coordinator links ${domain}, directly or through another target. The "
                          "coordinator links the record formats (kiln_records) and the environments "
                          "(kiln_environments) only: move what it needs into records/ "
                          "(docs/architecture.md, \"Source tree and CMake targets\").")
    endif()
  endforeach()
endfunction()
