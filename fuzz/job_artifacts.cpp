// A job's artifacts and args as they arrive from a submitter: the first line names the artifacts
// (space-separated), each further line is an argument. Whatever check_job_artifacts accepts,
// substitute_artifacts rewrites, leaving no placeholder behind.
#include <sstream>
#include <string>
#include <vector>

#include "common/protocol/artifacts.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(job_artifacts) {
  using namespace kiln::protocol;
  std::istringstream in{std::string(kiln::fuzz::as_text(data, size))};
  std::string line;
  std::getline(in, line);
  std::vector<ArtifactRef> artifacts;
  std::istringstream names(line);
  for (std::string name; names >> name;) artifacts.push_back(ArtifactRef{name, std::string(64, 'a'), 1});
  std::vector<std::string> args;
  while (std::getline(in, line)) args.push_back(line);
  const bool accepted = check_job_artifacts(args, artifacts).has_value();
  auto substituted = substitute_artifacts(args, artifacts, "/work/job-1-1/artifacts");
  if (accepted != substituted.has_value()) kiln::fuzz::violated("check and substitution disagree");
  if (!substituted) return 0;
  for (const std::string& arg : *substituted) {
    if (arg.find("{artifact:") != std::string::npos || arg.find("{artifacts}") != std::string::npos) {
      kiln::fuzz::violated("a placeholder survived substitution");
    }
  }
  return 0;
}
