# Precompiled headers shared by every C++ target. Most translation units parse the same
# standard headers, nlohmann/json and tl::expected; parsing them once per build instead of
# once per unit saves about 2 s of CPU in a unit that uses JSON (docs/performance.md).
#
# GCC accepts a precompiled header only when it was built with the same -fPIC/-fPIE setting
# and the same command-line macros as the unit using it, so libraries and executables each
# reuse their own, built from an empty unit that carries only the project-wide flags. A
# target may add macros these headers do not read. A target whose flags make GCC refuse the
# header gets an invalid-pch warning, not an error: GCC parses the headers instead, correct
# but slower.
#
# Enabled by -DKILN_PRECOMPILED_HEADERS=ON (top-level CMakeLists.txt).

set(kiln_precompiled_headers
  <algorithm> <array> <chrono> <cstdint> <functional> <map> <memory> <optional> <set>
  <string> <string_view> <unordered_map> <utility> <variant> <vector>
  <nlohmann/json.hpp> <tl/expected.hpp>)

# An owner per combination of position-independence and optimisation a target compiles with:
# libraries -fPIC, executables -fPIE; the tests' own code -O0 (tests/CMakeLists.txt), the rest
# the build type's. Built from an empty unit carrying only those flags, on first need.
function(kiln_pch_owner pic_flag optimize out)
  set(name kiln_pch_${pic_flag}_${optimize})
  string(REPLACE "-" "" name ${name})
  if(NOT TARGET ${name})
    add_library(${name} OBJECT ${KILN_SOURCE_ROOT}/cmake/kiln_pch.cpp)
    # The flag is set by hand so that the owner of the executables' header gets -fPIE.
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${name} PRIVATE ${pic_flag})
    if(optimize STREQUAL "test")
      target_compile_options(${name} PRIVATE -O0)
    endif()
    target_link_libraries(${name} PRIVATE nlohmann_json::nlohmann_json tl::expected)
    target_precompile_headers(${name} PRIVATE ${kiln_precompiled_headers})
  endif()
  set(${out} ${name} PARENT_SCOPE)
endfunction()

function(kiln_targets_in dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    kiln_targets_in(${sub} sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# Called once at the end of the top-level CMakeLists.txt, after every target exists.
function(kiln_use_precompiled_headers)
  if(NOT KILN_PRECOMPILED_HEADERS)
    return()
  endif()
  kiln_targets_in(${CMAKE_SOURCE_DIR} targets)
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    get_target_property(sources ${target} SOURCES)
    list(FILTER sources INCLUDE REGEX "\\.cpp$")
    if(type STREQUAL "INTERFACE_LIBRARY" OR NOT sources OR target MATCHES "^kiln_pch_")
      continue()
    endif()
    if(type STREQUAL "EXECUTABLE")
      set(pic_flag -fPIE)
    else()
      set(pic_flag -fPIC)
    endif()
    get_target_property(options ${target} COMPILE_OPTIONS)
    if("-O0" IN_LIST options)
      set(optimize test)
    else()
      set(optimize build)
    endif()
    kiln_pch_owner(${pic_flag} ${optimize} owner)
    target_precompile_headers(${target} REUSE_FROM ${owner})
    target_compile_options(${target} PRIVATE -Wno-error=invalid-pch)
  endforeach()
endfunction()
