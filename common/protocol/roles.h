// Which priority classes each client role may submit: the coordinator enforces it, and the
// kiln client checks it before a qualification run submits its first job.
#pragma once

#include "common/protocol/messages.h"

namespace kiln::protocol {

inline bool role_may_submit(Role role, PriorityClass cls) {
  switch (role) {
    case Role::admin:
    case Role::ops: return true;
    case Role::ci: return cls != PriorityClass::experiment;
    case Role::developer:
    case Role::lab: return cls == PriorityClass::experiment;
    case Role::agent: return false;
  }
  return false;
}

// Who may upload job artifacts (put_artifact): the roles that record bundles and results. Agents
// only read them (get_artifact).
inline bool role_may_put_artifact(Role role) {
  return role == Role::ci || role == Role::ops || role == Role::admin;
}

// Who may read the audit log (list_audit): the people who answer for the fleet.
inline bool role_may_read_audit(Role role) { return role == Role::ops || role == Role::admin; }

}  // namespace kiln::protocol
