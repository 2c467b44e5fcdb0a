#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>

#include "common/numerics/tensor_io.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

using namespace kiln::numerics;
using namespace std::string_literals;

namespace {

// What numpy.save writes for np.array([1.0, 2.0], dtype=np.float32): version 1.0, the header
// dict padded with spaces and a newline so the data starts at byte 128.
std::string numpy_float32_pair() {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  dict.append(117 - dict.size(), ' ');
  dict += "\n";
  return "\x93NUMPY\x01\x00"s + "\x76\x00"s + dict + "\x00\x00\x80\x3F"s + "\x00\x00\x00\x40"s;
}

std::string npy_with(const std::string& dict, const std::string& data) {
  std::string out = "\x93NUMPY\x01\x00"s;
  out.push_back(static_cast<char>(dict.size() & 0xFF));
  out.push_back(static_cast<char>(dict.size() >> 8));
  return out + dict + data;
}

ReadOptions with_raw(DType dtype) {
  ReadOptions options;
  options.raw_dtype = dtype;
  return options;
}

std::string error_of(const kiln::Result<Tensor>& result) {
  REQUIRE_FALSE(result.has_value());
  return result.error().message;
}

using kiln::testing::contains;

std::string safetensors_with_header(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xFF));
  }
  return out + header + data;
}

}  // namespace

TEST_CASE("npy: reads and writes exactly what numpy writes") {
  const std::string bytes = numpy_float32_pair();
  REQUIRE(bytes.size() == 136);
  auto tensor = parse_npy(bytes, {});
  REQUIRE(tensor.has_value());
  CHECK(tensor->dtype == DType::f32);
  CHECK(tensor->shape == std::vector<int64_t>{2});
  CHECK(tensor->values == std::vector<double>{1.0, 2.0});
  CHECK(serialize_npy(*tensor).value() == bytes);
}

TEST_CASE("npy: round trips every dtype and shape") {
  const std::vector<double> values = {1.0, -2.5, 0.0, -0.0, 448.0, 0.001953125};
  for (DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8_e4m3, DType::f8_e5m2}) {
    CAPTURE(to_string(dtype));
    Tensor tensor{dtype, {2, 3}, values};
    auto bytes = serialize_npy(tensor);
    REQUIRE(bytes.has_value());
    CHECK(bytes->size() % 64 == (6 * size_in_bytes(dtype)) % 64);  // data is 64-byte aligned
    auto back = parse_npy(*bytes, with_raw(dtype));
    REQUIRE(back.has_value());
    CHECK(back->dtype == dtype);
    CHECK(back->shape == tensor.shape);
    CHECK(back->values == values);
    CHECK(std::signbit(back->values[3]));
  }
  Tensor scalar{DType::f64, {}, {3.25}};
  CHECK(parse_npy(serialize_npy(scalar).value(), {})->values == std::vector<double>{3.25});
  Tensor empty{DType::f32, {0, 4}, {}};
  CHECK(parse_npy(serialize_npy(empty).value(), {})->shape == std::vector<int64_t>{0, 4});
}

TEST_CASE("npy: non-finite values survive the round trip") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor tensor{DType::f32, {3}, {inf, -inf, std::numeric_limits<double>::quiet_NaN()}};
  auto back = parse_npy(serialize_npy(tensor).value(), {});
  REQUIRE(back.has_value());
  CHECK(back->values[0] == inf);
  CHECK(back->values[1] == -inf);
  CHECK(std::isnan(back->values[2]));
}

TEST_CASE("npy: ml_dtypes raw bf16 and fp8 need the caller to state the format") {
  // bf16 1.0 = 0x3F80, -2.0 = 0xC000, stored little-endian under descr '<V2'.
  const std::string bytes =
      npy_with("{'descr': '<V2', 'fortran_order': False, 'shape': (2,), }\n", "\x80\x3F\x00\xC0"s);
  CHECK(contains(error_of(parse_npy(bytes, {})), "--dtype bf16"));
  auto tensor = parse_npy(bytes, with_raw(DType::bf16));
  REQUIRE(tensor.has_value());
  CHECK(tensor->values == std::vector<double>{1.0, -2.0});
  CHECK(contains(error_of(parse_npy(bytes, with_raw(DType::f8_e4m3))), "1 bytes"));
  // E4M3 0x7E = 448 under '|V1'.
  const std::string fp8 = npy_with("{'descr': '|V1', 'fortran_order': False, 'shape': (1,), }\n", "\x7E"s);
  CHECK(parse_npy(fp8, with_raw(DType::f8_e4m3))->values == std::vector<double>{448.0});
  CHECK(std::isnan(parse_npy(fp8, with_raw(DType::f8_e5m2))->values[0]));  // 0.11111.10 is NaN in E5M2
}

TEST_CASE("npy: version 2.0 headers") {
  std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }\n";
  std::string bytes = "\x93NUMPY\x02\x00"s;
  for (int i = 0; i < 4; ++i) {
    bytes.push_back(static_cast<char>((dict.size() >> (8 * i)) & 0xFF));
  }
  bytes += dict + "\x00\x00\x00\x00\x00\x00\xF0\x3F"s;  // 1.0 as float64
  CHECK(parse_npy(bytes, {})->values == std::vector<double>{1.0});
}

TEST_CASE("npy: every malformed file is a clear error") {
  const std::string good = numpy_float32_pair();
  CHECK(contains(error_of(parse_npy("", {})), "magic"));
  CHECK(contains(error_of(parse_npy("PK\x03\x04 not numpy at all", {})), "magic"));
  CHECK(contains(error_of(parse_npy(good.substr(0, 60), {})), "truncated"));
  CHECK(contains(error_of(parse_npy(good.substr(0, good.size() - 1), {})), "truncated"));
  CHECK(contains(error_of(parse_npy(good + "x", {})), "trailing"));
  std::string version = good;
  version[6] = '\x07';
  CHECK(contains(error_of(parse_npy(version, {})), "version 7.0"));
  const auto f4 = [](const std::string& rest) {
    return npy_with("{'descr': '<f4', 'fortran_order': False, 'shape': " + rest + "\n", "\0\0\0\0"s);
  };
  CHECK(contains(error_of(parse_npy(f4("(1,), "), {})), "malformed"));       // unterminated dict
  CHECK(contains(error_of(parse_npy(f4("(-1,), }"), {})), "malformed"));     // negative dimension
  CHECK(contains(error_of(parse_npy(f4("(1), }"), {})), "'(n,)'"));
  CHECK(contains(error_of(parse_npy(f4("(2,), }"), {})), "truncated"));      // shape larger than data
  CHECK(contains(error_of(parse_npy(f4("(99999999999999,), }"), {})), "2^40"));
  CHECK(contains(error_of(parse_npy(
                     npy_with("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }\n", "\0\0\0\0"s), {})),
                 "Fortran"));
  CHECK(contains(error_of(parse_npy(
                     npy_with("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }\n", "\0\0\0\0"s), {})),
                 "big-endian"));
  CHECK(contains(error_of(parse_npy(
                     npy_with("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }\n", "\0\0\0\0"s), {})),
                 "not a floating point type"));
  CHECK(contains(error_of(parse_npy(npy_with("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }\n",
                                             "\0\0\0\0"s),
                                    {})),
                 "structured"));
  CHECK(contains(error_of(parse_npy(npy_with("{'descr': '<f4', 'shape': (1,), }\n", "\0\0\0\0"s), {})),
                 "missing key 'fortran_order'"));
  CHECK(contains(error_of(parse_npy(npy_with("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                                             "'shape': (1,), }\n",
                                             "\0\0\0\0"s),
                                    {})),
                 "twice"));
  ReadOptions small;
  small.max_header_bytes = 64;
  CHECK(error_of(parse_npy(good, small)).find("limit") != std::string::npos);
}

TEST_CASE("safetensors: round trip with several tensors and metadata") {
  Tensor logits{DType::bf16, {2, 2}, {1.0, -2.0, 0.5, 3.0}};
  Tensor scale{DType::f32, {}, {0.25}};
  Tensor q{DType::f8_e4m3, {3}, {448.0, -0.001953125, 0.0}};
  auto bytes = serialize_safetensors({{"logits", logits}, {"scale", scale}, {"q", q}}, {{"format", "pt"}});
  REQUIRE(bytes.has_value());
  const uint64_t header_bytes = static_cast<unsigned char>((*bytes)[0]) | (static_cast<unsigned char>((*bytes)[1]) << 8);
  CHECK(header_bytes % 8 == 0);
  CHECK(safetensors_names(*bytes, {}).value() == std::vector<std::string>{"logits", "q", "scale"});
  ReadOptions pick;
  pick.tensor_name = "logits";
  auto back = parse_safetensors(*bytes, pick);
  REQUIRE(back.has_value());
  CHECK(back->dtype == DType::bf16);
  CHECK(back->shape == logits.shape);
  CHECK(back->values == logits.values);
  pick.tensor_name = "q";
  CHECK(parse_safetensors(*bytes, pick)->values == q.values);
  pick.tensor_name = "scale";
  CHECK(parse_safetensors(*bytes, pick)->values == std::vector<double>{0.25});
  pick.tensor_name = "missing";
  CHECK(contains(error_of(parse_safetensors(*bytes, pick)), "logits, q, scale"));
  CHECK(contains(error_of(parse_safetensors(*bytes, {})), "--tensor NAME"));
  auto only = serialize_safetensors({{"out", scale}});
  CHECK(parse_safetensors(only.value(), {})->values == std::vector<double>{0.25});
}

TEST_CASE("safetensors: reads a header written by hand like the reference library") {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})";
  // fp16 1.0 = 0x3C00, -0.5 = 0xB800.
  auto tensor = parse_safetensors(safetensors_with_header(header, "\x00\x3C\x00\xB8"s), {});
  REQUIRE(tensor.has_value());
  CHECK(tensor->dtype == DType::f16);
  CHECK(tensor->values == std::vector<double>{1.0, -0.5});
}

TEST_CASE("safetensors: every malformed file is a clear error") {
  const auto file = [](const std::string& header, const std::string& data) {
    return parse_safetensors(safetensors_with_header(header, data), {});
  };
  const std::string w = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  CHECK(contains(error_of(parse_safetensors("\x05\x00", {})), "shorter than"));
  CHECK(contains(error_of(parse_safetensors(safetensors_with_header(w, "\0\0\0\0"s).substr(0, 20), {})), "truncated"));
  CHECK(contains(error_of(file(w, "\0\0"s)), "outside"));
  CHECK(contains(error_of(file(w, "\0\0\0\0\0\0\0\0"s)), "cover 4 of the 8"));
  CHECK(contains(error_of(file("{not json", "")), "not valid JSON"));
  CHECK(contains(error_of(file("[1,2]", "")), "not a JSON object"));
  CHECK(contains(error_of(file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "\0\0\0\0"s)),
                 "span 4 bytes"));
  CHECK(contains(error_of(file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "\0\0\0\0"s)),
                 "non-negative"));
  CHECK(contains(error_of(file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "\0\0\0\0"s)),
                 "outside"));
  CHECK(contains(error_of(file(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "\0\0\0\0"s)), "dtype"));
  CHECK(contains(error_of(file(R"({"w":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", "\0\0\0\0"s)),
                 "dtype I32"));
  CHECK(contains(error_of(file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                               "\0\0\0\0"s)),
                 "overlap"));
  CHECK(contains(error_of(file(R"({"__metadata__":{"n":1},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                               "\0\0\0\0"s)),
                 "__metadata__"));
  std::string huge(8, '\0');
  huge[5] = '\x01';  // claims a 2^40-byte header
  auto too_large = parse_safetensors(huge + "{}", {});
  REQUIRE_FALSE(too_large.has_value());
  CHECK(too_large.error().code == kiln::Errc::too_large);
}

TEST_CASE("tensor files: read by content, write, and report missing files") {
  const kiln::testing::TempDir dir("kiln-numerics-io");
  Tensor tensor{DType::f32, {2}, {1.5, -3.0}};
  REQUIRE(write_npy_file(dir / "a.npy", tensor).has_value());
  REQUIRE(write_safetensors_file(dir / "b.safetensors", {{"x", tensor}}).has_value());
  REQUIRE(write_safetensors_file(dir / "c.bin", {{"x", tensor}}).has_value());
  for (const char* name : {"a.npy", "b.safetensors", "c.bin"}) {
    auto back = read_tensor_file(dir / name, {});
    REQUIRE(back.has_value());
    CHECK(back->values == tensor.values);
  }
  auto missing = read_tensor_file(dir / "nope.npy", {});
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().code == kiln::Errc::io);
  CHECK(contains(missing.error().message, "nope.npy"));
  ReadOptions tiny;
  tiny.max_file_bytes = 16;
  CHECK(read_tensor_file(dir / "a.npy", tiny).error().code == kiln::Errc::too_large);
}

TEST_CASE("writers refuse tensors whose values do not fill their shape") {
  Tensor bad{DType::f32, {2, 2}, {1.0}};
  CHECK_FALSE(serialize_npy(bad).has_value());
  CHECK_FALSE(serialize_safetensors({{"x", bad}}).has_value());
  Tensor ok{DType::f32, {1}, {1.0}};
  CHECK_FALSE(serialize_safetensors({{"x", ok}, {"x", ok}}).has_value());
  CHECK(serialize_safetensors({{"bad\xFFutf8", ok}}).has_value());  // replaced, not thrown
}
