#include "common/protocol/artifacts.h"

#include <doctest/doctest.h>

#include "common/protocol/codec.h"

using namespace kiln;
using namespace kiln::protocol;

namespace {

const std::string kDigest(64, 'a');

ArtifactRef artifact(std::string name, std::string digest = kDigest) { return {std::move(name), std::move(digest), 10}; }

bool mentions(const Status& status, const std::string& text) {
  return !status && status.error().message.find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("placeholders become the paths of the job's artifacts; other text stays") {
  const std::vector<std::string> args = {"--stack", "{artifact:stack.toml}", "--golden", "{artifacts}",
                                         "x={artifact:a}+{artifact:b}", "{not-a-placeholder}"};
  auto out = substitute_artifacts(args, {artifact("stack.toml"), artifact("a"), artifact("b")}, "/w/job-1-1/artifacts");
  REQUIRE(out.has_value());
  CHECK(*out == std::vector<std::string>{"--stack", "/w/job-1-1/artifacts/stack.toml", "--golden",
                                         "/w/job-1-1/artifacts", "x=/w/job-1-1/artifacts/a+/w/job-1-1/artifacts/b",
                                         "{not-a-placeholder}"});
}

TEST_CASE("a job's artifacts are refused when a name, a digest or a placeholder is wrong") {
  CHECK(check_job_artifacts({"{artifact:x}"}, {artifact("x")}).has_value());
  CHECK(mentions(check_job_artifacts({"{artifact:y}"}, {artifact("x")}), "names artifact \"y\""));
  CHECK(mentions(check_job_artifacts({"{artifact:x"}, {artifact("x")}), "without a closing"));
  CHECK(mentions(check_job_artifacts({}, {artifact("x"), artifact("x")}), "two artifacts are named"));
  CHECK(mentions(check_job_artifacts({}, {artifact("../etc")}), "must be 1 to 128"));
  CHECK(mentions(check_job_artifacts({}, {artifact("a/b")}), "must be 1 to 128"));
  CHECK(mentions(check_job_artifacts({}, {artifact(".hidden")}), "not starting with '.'"));
  CHECK(mentions(check_job_artifacts({}, {artifact("x", std::string(64, 'A'))}), "not a SHA-256"));
  CHECK_FALSE(substitute_artifacts({"{artifact:y}"}, {}, "/d").has_value());
}

TEST_CASE("artifact bytes travel as msgpack binary, whatever they hold") {
  ArtifactChunk chunk{kDigest, 4, 0, std::string("\x00\xff\xfe\x80", 4)};
  auto frames = encode(make_envelope(chunk, 1));
  REQUIRE(frames.has_value());
  auto back = decode(frames->header, frames->body);
  REQUIRE(back.has_value());
  CHECK(std::get<ArtifactChunk>(back->body).data == chunk.data);
}
