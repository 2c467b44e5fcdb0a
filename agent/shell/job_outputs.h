// The files behind kiln's verdict on a job's outputs (agent/bench/outputs.h): the outputs the
// result document lists, read from the job's work dir, and the goldens of the same names from
// the job's artifacts, with the tolerances a .golden.json among them gives.
#pragma once

#include <filesystem>
#include <string_view>
#include <vector>

#include "agent/bench/outputs.h"

namespace kiln::agent {

// A golden for output N is the artifact N.npy or <anything>.N.npy, or else the tensor N of a
// .safetensors artifact; its tolerances are `tolerances.N` of a .golden.json artifact.
bench::OutputsVerdict judge_job_outputs(const std::vector<bench::DeclaredOutput>& outputs,
                                        const std::filesystem::path& work_dir,
                                        const std::filesystem::path& artifacts_dir, std::string_view document_dtype,
                                        bool workload_passed);

}  // namespace kiln::agent
