// Job artifacts with the real binaries: a file reaches an agent by digest, from the coordinator
// (uploaded with put_artifact) or from an HTTP store, with no path of the submitter's in the job;
// a damaged cache entry is fetched again; a source with other bytes than the digest fails the
// job's start with a clear message.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "common/protocol/messages.h"
#include "common/sha256.h"
#include "qualification/shell/artifact_upload.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"
#include "tests/support/loopback_http.h"

using namespace kiln;
using namespace kiln::protocol;
using namespace kiln::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// `cat` of the artifact, through the fleet's shell workload: its output is the file's bytes.
SubmitJob cat_job(const ArtifactRef& artifact) {
  SubmitJob job;
  job.workload = "shell";
  job.args = {"-c", "cat \"$1\"", "sh", "{artifact:" + artifact.name + "}"};
  job.priority_class = PriorityClass::nightly;
  job.max_attempts = 1;
  job.artifacts = {artifact};
  return job;
}

ArtifactRef describe(const std::string& name, const std::string& bytes, const fs::path& scratch) {
  std::ofstream(scratch, std::ios::binary) << bytes;
  auto digest = sha256_of_file(scratch.string(), 1 << 20);
  REQUIRE(digest.has_value());
  fs::remove(scratch);
  return ArtifactRef{name, *digest, bytes.size()};
}

}  // namespace

TEST_CASE("a job's file reaches the agent by digest from the coordinator; a damaged cached copy is fetched again") {
  Fleet fleet("artifacts");
  fleet.add_key("ci", "ci");
  fleet.add_key("dev", "developer");
  fleet.add_agent({"n01", "a"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto ci = fleet.client("ci");
  REQUIRE(Fleet::eventually([&] { return node_state_is(*ci, "n01", NodeState::up); }, 15s));

  // The file exists only until it is uploaded: the agent can only have it by its digest.
  const fs::path original = fleet.dir() / "outside" / "stack.toml";
  fs::create_directories(original.parent_path());
  // More than one piece; the job's output tail shows the end of it.
  const std::string bytes = std::string(300000, 'k') + "\neffects = \"none\"\n";
  std::ofstream(original, std::ios::binary) << bytes;
  auto uploaded = qualification::shell::upload_artifact(*ci, "stack.toml", original);
  REQUIRE_MESSAGE(uploaded.has_value(), uploaded.error().message);
  fs::remove_all(original.parent_path());

  // Uploading again costs nothing: the coordinator has it.
  std::ofstream(fleet.dir() / "again.toml", std::ios::binary) << bytes;
  auto again = qualification::shell::upload_artifact(*ci, "stack.toml", fleet.dir() / "again.toml");
  REQUIRE(again.has_value());
  CHECK(again->sha256 == uploaded->sha256);

  // Only CI, ops and admin keys upload.
  auto dev = fleet.client("dev");
  auto refused = dev->request(PutArtifact{uploaded->sha256, uploaded->size_bytes, 0, {}});
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message.find("may not upload artifacts") != std::string::npos);

  JobDetail first = run_to_end(*ci, cat_job(*uploaded));
  REQUIRE_MESSAGE(first.job.state == JobState::succeeded, first.job.detail);
  CHECK(first.output_tail.find("effects = \"none\"") != std::string::npos);

  // Damage the cached copy: the next job's fetch notices, removes it and fetches it again.
  const fs::path cached = fleet.dir() / "work-n01" / "artifacts" / "sha256" / uploaded->sha256;
  REQUIRE(fs::exists(cached));
  fs::permissions(cached, fs::perms::owner_write, fs::perm_options::add);
  std::ofstream(cached, std::ios::binary | std::ios::in | std::ios::out) << "damaged";
  JobDetail second = run_to_end(*ci, cat_job(*uploaded));
  REQUIRE_MESSAGE(second.job.state == JobState::succeeded, second.job.detail);
  CHECK(second.output_tail.find("effects = \"none\"") != std::string::npos);
  CHECK(fleet.log_of("n01").find("the cached copy is damaged") != std::string::npos);
  auto digest = sha256_of_file(cached.string(), 1 << 20);
  REQUIRE(digest.has_value());
  CHECK(*digest == uploaded->sha256);

  // A digest nobody holds fails the start, saying what to do.
  ArtifactRef unknown = *uploaded;
  unknown.sha256 = std::string(64, 'b');
  JobDetail missing = run_to_end(*ci, cat_job(unknown));
  CHECK(missing.job.state == JobState::failed);
  CHECK(missing.job.detail.find("could not fetch the job's artifacts") != std::string::npos);
  CHECK(missing.job.detail.find("upload it") != std::string::npos);

  // A job naming an artifact its args do not list is refused at submission.
  SubmitJob wrong = cat_job(*uploaded);
  wrong.args.back() = "{artifact:other}";
  auto wrong_reply = ci->request(wrong);
  REQUIRE_FALSE(wrong_reply.has_value());
  CHECK(wrong_reply.error().message.find("names artifact \"other\"") != std::string::npos);
}

TEST_CASE("an agent fetches from the HTTP store named in its config, and refuses bytes that are not the digest") {
  const std::string good = "served over HTTP\n";
  const fs::path scratch = fs::temp_directory_path() / "kiln-artifact-scratch";
  const ArtifactRef served = describe("data.txt", good, scratch);
  const ArtifactRef liar = describe("data.txt", "what the job expects\n", scratch);
  LoopbackServer store([&](const Request& request) -> Response {
    if (request.head.find("GET /store/sha256/" + served.sha256 + " ") == 0) return {200, good};
    if (request.head.find("GET /store/sha256/" + liar.sha256 + " ") == 0) return {200, "something else!!!!!!\n"};
    return {404, "not here"};
  });

  Fleet fleet("artifacts-http");
  fleet.add_key("ci", "ci");
  fleet.add_agent({"n01", "a"}, "", "\n[artifacts]\nhttp_store = \"" + store.url("/store/") + "\"\n");
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto ci = fleet.client("ci");
  REQUIRE(Fleet::eventually([&] { return node_state_is(*ci, "n01", NodeState::up); }, 15s));

  // Never uploaded to the coordinator: only the HTTP store has it.
  JobDetail fetched = run_to_end(*ci, cat_job(served));
  REQUIRE_MESSAGE(fetched.job.state == JobState::succeeded, fetched.job.detail);
  CHECK(fetched.output_tail.find("served over HTTP") != std::string::npos);
  bool asked = false;
  for (const Request& request : store.requests()) {
    asked = asked || request.head.find("GET /store/sha256/" + served.sha256) == 0;
  }
  CHECK(asked);

  JobDetail refused = run_to_end(*ci, cat_job(liar));
  CHECK(refused.job.state == JobState::failed);
  CHECK(refused.job.detail.find("is not what the job names") != std::string::npos);
  CHECK_FALSE(fs::exists(fleet.dir() / "work-n01" / "artifacts" / "sha256" / liar.sha256));
}
