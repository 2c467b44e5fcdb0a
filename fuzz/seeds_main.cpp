// Writes the binary seed inputs of the fuzz targets with kiln's own encoders, in the layout
// each target reads: one message of every protocol type (filled in as the protocol tests do),
// and .npy and .safetensors files of every element type. Usage: kiln-fuzz-seeds CORPUS_DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <variant>

#include "common/numerics/tensor_io.h"
#include "common/protocol/codec.h"

namespace {

namespace fs = std::filesystem;
using namespace kiln;

void write_seed(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary | std::ios::trunc) << bytes;
}

template <class T>
protocol::Body filled_message() {
  T value{};
  if constexpr (requires { value.job_id; }) value.job_id = 1;
  if constexpr (requires { value.node_id; }) value.node_id = "n1";
  if constexpr (requires { value.workload; }) value.workload = "smoke";
  if constexpr (requires { value.chip_indices; }) value.chip_indices = {0};
  if constexpr (requires { value.hardware_revision; }) value.hardware_revision = "a";
  if constexpr (requires { value.protocol_versions; }) value.protocol_versions = {1};
  if constexpr (requires { value.key_name; }) value.key_name = "me";
  if constexpr (requires { value.code; }) value.code = "bad_message";
  if constexpr (requires { value.lease_id; }) value.lease_id = 1;
  if constexpr (requires { value.key; }) value.key = "k1";
  if constexpr (requires { value.reason; }) value.reason = "fan failure";
  if constexpr (requires { value.lease.lease_id; }) value.lease.lease_id = 1;
  if constexpr (requires { value.job.workload; }) value.job.workload = "smoke";
  return value;
}

template <std::size_t... I>
void write_protocol_seeds(const fs::path& dir, std::index_sequence<I...>) {
  auto write_one = [&](protocol::Body body) {
    const std::string type(protocol::type_name(body));
    auto frames = protocol::encode(protocol::make_envelope(std::move(body), 42, 7));
    if (!frames) {
      std::fprintf(stderr, "skipping %s: %s\n", type.c_str(), frames.error().message.c_str());
      return;
    }
    const std::size_t length = frames->header.size();
    std::string input{static_cast<char>(length & 0xff), static_cast<char>(length >> 8)};
    write_seed(dir, type, input + frames->header + frames->body);
  };
  (write_one(filled_message<std::variant_alternative_t<I, protocol::Body>>()), ...);
}

void write_tensor_seeds(const fs::path& corpus) {
  using namespace numerics;
  constexpr DType kTypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8_e4m3, DType::f8_e5m2};
  // The npy target's first byte picks the raw element type: 0..3 as listed there, else none.
  constexpr char kRawSelector[] = {'\xff', '\xff', '\x01', '\x00', '\x02', '\x03'};
  std::vector<NamedTensor> all;
  for (std::size_t i = 0; i < std::size(kTypes); ++i) {
    const Tensor tensor{kTypes[i], {2, 3}, {1.0, -2.5, 0.0, 3.25, 1e-3, -7.0}};
    const std::string name(to_string(kTypes[i]));
    if (auto npy = serialize_npy(tensor)) write_seed(corpus / "npy", name, kRawSelector[i] + *npy);
    if (auto one = serialize_safetensors({{name, tensor}})) write_seed(corpus / "safetensors", name, *one);
    all.push_back({name, tensor});
  }
  if (auto scalar = serialize_npy(Tensor{DType::f32, {}, {3.25}})) write_seed(corpus / "npy", "scalar", '\xff' + *scalar);
  if (auto empty = serialize_npy(Tensor{DType::f64, {0, 4}, {}})) write_seed(corpus / "npy", "empty", '\xff' + *empty);
  if (auto many = serialize_safetensors(all, {{"format", "pt"}})) write_seed(corpus / "safetensors", "all-types", *many);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kiln-fuzz-seeds CORPUS_DIR\n");
    return 2;
  }
  const fs::path corpus = argv[1];
  write_protocol_seeds(corpus / "protocol_decode", std::make_index_sequence<std::variant_size_v<protocol::Body>>());
  write_tensor_seeds(corpus);
  return 0;
}
