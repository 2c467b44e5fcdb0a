// Every kiln command, in the order `kiln --help` lists them. Each family's file adds its own.
#pragma once

#include "cli/command.h"

namespace kiln::cli {

void add_account_commands(CommandList& commands);        // keygen, whoami
void add_node_commands(CommandList& commands);           // nodes, drain, undrain
void add_diag_command(CommandList& commands);            // diag, recheck
void add_job_commands(CommandList& commands);            // submit, jobs, result, cancel
void add_rerun_command(CommandList& commands);           // rerun
void add_lease_commands(CommandList& commands);          // lease, leases, release-lease
void add_queue_command(CommandList& commands);           // queue
void add_compare_commands(CommandList& commands);        // compare-tensors, compare
void add_change_commands(CommandList& commands);         // change add|import, changes
void add_bundle_commands(CommandList& commands);         // bundle build|show|accept, bundles
void add_unit_command(CommandList& commands);            // unit
void add_qualification_commands(CommandList& commands);  // smoke, nightly, qualify-release
void add_stability_command(CommandList& commands);       // stability
void add_switchover_command(CommandList& commands);      // switchover
void add_record_commands(CommandList& commands);         // runs, run, tickets, ticket ack|fix|duplicate|reopen
void add_release_commands(CommandList& commands);        // release promote|approve|merge|rollback|status
void add_environment_commands(CommandList& commands);    // envs, artifact upload
void add_audit_command(CommandList& commands);           // audit
void add_plan_command(CommandList& commands);            // plan
void add_risk_commands(CommandList& commands);           // risks, waive, waivers, waiver withdraw

inline CommandList all_commands() {
  CommandList commands;
  for (auto add : {add_account_commands, add_node_commands, add_diag_command, add_job_commands, add_rerun_command,
                   add_lease_commands, add_queue_command, add_compare_commands, add_change_commands,
                   add_bundle_commands, add_unit_command, add_qualification_commands, add_stability_command,
                   add_switchover_command, add_record_commands, add_release_commands, add_risk_commands,
                   add_environment_commands, add_audit_command, add_plan_command}) {
    add(commands);
  }
  return commands;
}

}  // namespace kiln::cli
