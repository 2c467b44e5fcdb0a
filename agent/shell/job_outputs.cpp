#include "agent/shell/job_outputs.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/numerics/tensor_io.h"

namespace kiln::agent {

namespace fs = std::filesystem;
using bench::DeclaredOutput;
using bench::GoldenTolerance;

namespace {

constexpr std::size_t kMaxGoldenJsonBytes = 16 << 20;

// The job's artifacts by name, sorted so that the same golden is found every time.
std::vector<fs::path> artifact_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) files.push_back(it->path());
  std::sort(files.begin(), files.end());
  return files;
}

// The job's .golden.json artifacts, each read once for all its outputs: its document, or why it
// could not be read.
std::vector<Result<nlohmann::json>> golden_documents(const std::vector<fs::path>& artifacts) {
  std::vector<Result<nlohmann::json>> documents;
  for (const fs::path& file : artifacts) {
    if (!file.filename().string().ends_with(".golden.json")) continue;
    auto bytes = numerics::read_file_bytes(file, kMaxGoldenJsonBytes);
    if (!bytes) {
      documents.push_back(tl::unexpected(bytes.error()));
      continue;
    }
    documents.push_back(nlohmann::json::parse(*bytes, nullptr, false));
  }
  return documents;
}

// The first golden document (by file name) with tolerances for the output; one that could not be
// read before it is an error.
Result<GoldenTolerance> golden_tolerance(const std::vector<Result<nlohmann::json>>& documents, const std::string& name) {
  for (const auto& doc : documents) {
    if (!doc) return tl::unexpected(doc.error());
    if (!doc->is_object() || !doc->contains("tolerances")) continue;
    const auto& tolerances = doc->at("tolerances");
    if (tolerances.is_object() && tolerances.contains(name)) {
      return bench::parse_golden_tolerance(tolerances.at(name), name);
    }
  }
  return GoldenTolerance{};
}

Result<numerics::Tensor> find_golden(const std::vector<fs::path>& artifacts, const fs::path& artifacts_dir,
                                     const std::string& name, const numerics::ReadOptions& read) {
  for (const fs::path& file : artifacts) {
    const std::string filename = file.filename().string();
    if (filename == name + ".npy" || filename.ends_with("." + name + ".npy")) {
      return numerics::read_tensor_file(file, read);
    }
  }
  for (const fs::path& file : artifacts) {
    if (!file.filename().string().ends_with(".safetensors")) continue;
    auto bytes = numerics::read_file_bytes(file, read.max_file_bytes);
    if (!bytes) return tl::unexpected(bytes.error());
    auto names = numerics::safetensors_names(*bytes, read);
    if (!names || std::find(names->begin(), names->end(), name) == names->end()) continue;
    numerics::ReadOptions named = read;
    named.tensor_name = name;
    return numerics::parse_safetensors(*bytes, named);
  }
  return fail(Errc::not_found,
              fmt::format("none of the job's artifacts in {} is {}.npy, <model>.{}.npy or a .safetensors holding a "
                          "tensor '{}'; ship the golden with the job (the qualifier's artifacts = \"digest\") under "
                          "the output's name",
                          artifacts_dir.string(), name, name, name));
}

}  // namespace

bench::OutputsVerdict judge_job_outputs(const std::vector<DeclaredOutput>& outputs, const fs::path& work_dir,
                                        const fs::path& artifacts_dir, std::string_view document_dtype,
                                        bool workload_passed) {
  const auto artifacts = artifact_files(artifacts_dir);
  const auto goldens = golden_documents(artifacts);
  std::optional<numerics::DType> document_format;
  if (auto parsed = numerics::parse_dtype(document_dtype)) document_format = *parsed;
  std::vector<bench::OutputUnderJudgement> judged;
  for (const DeclaredOutput& output : outputs) {
    auto tolerance = golden_tolerance(goldens, output.name);
    const GoldenTolerance golden = tolerance.value_or(GoldenTolerance{});
    const auto dtype = bench::compared_dtype(golden, output, document_format);
    numerics::ReadOptions read;
    read.raw_dtype = dtype;
    read.tensor_name = output.name;  // .npy files ignore it
    auto golden_tensor = tolerance ? find_golden(artifacts, artifacts_dir, output.name, read)
                                   : Result<numerics::Tensor>(tl::unexpected(tolerance.error()));
    auto actual = numerics::read_tensor_file(work_dir / output.file, read);
    const auto options = bench::compare_options_for(golden, dtype.value_or(actual ? actual->dtype : numerics::DType::f32));
    bench::OutputUnderJudgement entry{output, std::move(golden_tensor), std::move(actual), options};
    judged.push_back(std::move(entry));
  }
  return bench::judge_outputs(judged, workload_passed);
}

}  // namespace kiln::agent
