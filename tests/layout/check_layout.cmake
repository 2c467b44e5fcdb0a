# The layout's rules about who includes whom (docs/architecture.md, "Source tree and CMake
# targets"), read from every source file's #include lines: run by ctest as layout_test with
# -DKILN_SOURCE_ROOT=<checkout>.
#   - no library includes the CLI: cli/ is included from cli/ only;
#   - nothing outside sim/ (and the tests and fuzzers) includes the sim;
#   - the coordinator includes no qualification domain, qualifier, release decision or CLI code;
#   - no room of the coordinator core holds another: no header of coordinator/core declares a
#     member that is a reference or pointer to a room (what a room reads of another is a const&
#     parameter of the call, what it decides for another goes back to the router).
if(NOT KILN_SOURCE_ROOT)
  message(FATAL_ERROR "run as: cmake -DKILN_SOURCE_ROOT=<checkout> -P check_layout.cmake")
endif()
file(GLOB_RECURSE sources RELATIVE ${KILN_SOURCE_ROOT}
  ${KILN_SOURCE_ROOT}/*.h ${KILN_SOURCE_ROOT}/*.cpp ${KILN_SOURCE_ROOT}/*.c)
set(problems "")
set(checked 0)
foreach(source IN LISTS sources)
  if(source MATCHES "^(build|tests|fuzz)[^/]*/" OR source MATCHES "^\\.")
    continue()
  endif()
  math(EXPR checked "${checked} + 1")
  file(STRINGS ${KILN_SOURCE_ROOT}/${source} includes REGEX "^#include \"")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" header "${line}")
    if(header MATCHES "^cli/" AND NOT source MATCHES "^cli/")
      list(APPEND problems "${source} includes ${header}: only the CLI includes cli/ (a library it needs belongs in client/ or its own folder)")
    endif()
    if(header MATCHES "^sim/" AND NOT source MATCHES "^sim/")
      list(APPEND problems "${source} includes ${header}: production code takes what it needs from the sim as data or an interface")
    endif()
    if(source MATCHES "^coordinator/" AND header MATCHES "^(qualification|qualifier|report|strategy|cli)/")
      list(APPEND problems "${source} includes ${header}: the coordinator uses the record formats (records/), not the qualification domain")
    endif()
    if(source MATCHES "^coordinator/" AND header MATCHES "^release/" AND NOT header MATCHES "^release/(environments\\.h|shell/(repository|git)\\.h)$")
      list(APPEND problems "${source} includes ${header}: the coordinator reads the environments repository only")
    endif()
  endforeach()
endforeach()
# The rooms of the coordinator core (coordinator_core.h): a member line is a declaration ending in
# `;`, `=` or `{` after its name, so parameters (followed by `,` or `)`) do not match.
set(rooms "JobTable|LeaseLifecycle|SchedulerDecisions|AgentSessions|Rollouts|RecordBook")
set(member_of_room "^[ \t]*(const[ \t]+)?(${rooms})[ \t]*[&*][ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*(;|=|{)")
file(GLOB core_headers RELATIVE ${KILN_SOURCE_ROOT} ${KILN_SOURCE_ROOT}/coordinator/core/*.h)
list(LENGTH core_headers core_header_count)
if(core_header_count LESS 10)
  message(FATAL_ERROR "layout_test found only ${core_header_count} headers in coordinator/core: is that the checkout?")
endif()
foreach(header IN LISTS core_headers)
  file(STRINGS ${KILN_SOURCE_ROOT}/${header} members REGEX "${member_of_room}")
  foreach(member IN LISTS members)
    string(REGEX REPLACE "^[ \t]*([^;={]*[^;={ \t]).*$" "\\1" member "${member}")
    list(APPEND problems "${header} declares the member `${member}`: a room holds no other room, so take what it reads as a const& parameter and hand what it decides for another back to the router (docs/architecture.md, section 3)")
  endforeach()
endforeach()
if(checked LESS 100)
  message(FATAL_ERROR "layout_test read only ${checked} source files under ${KILN_SOURCE_ROOT}: is that the checkout?")
endif()
if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "the layout's rules are broken:\n  ${text}")
endif()
message(STATUS "layout: ${checked} source files follow the include rules; the ${core_header_count} headers of coordinator/core declare no room holding another")
