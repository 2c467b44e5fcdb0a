// Bit patterns below are derived by hand from the formats' definitions (IEEE 754 binary16,
// bfloat16 = the top half of binary32, OCP 8-bit FP v1.0 E4M3 and E5M2), not from this code.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/numerics/formats.h"

using namespace kiln::numerics;

namespace {

constexpr auto sat = Saturation::saturating;
constexpr auto nonsat = Saturation::non_saturating;
const float inf_f32 = std::numeric_limits<float>::infinity();
const float qnan_f32 = std::numeric_limits<float>::quiet_NaN();

float from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }

}  // namespace

TEST_CASE("E4M3: exact values, subnormals, largest finite, NaN, negative zero") {
  // S.EEEE.MMM, bias 7: 1.0 = 0.0111.000
  CHECK(float_to_e4m3_bits(1.0f, nonsat) == 0x38);
  CHECK(float_to_e4m3_bits(-1.0f, nonsat) == 0xB8);
  CHECK(float_to_e4m3_bits(448.0f, nonsat) == 0x7E);   // 0.1111.110 = 1.75 * 2^8
  CHECK(float_to_e4m3_bits(-448.0f, nonsat) == 0xFE);
  CHECK(float_to_e4m3_bits(0.015625f, nonsat) == 0x08);  // min normal 2^-6 = 0.0001.000
  CHECK(float_to_e4m3_bits(0.013671875f, nonsat) == 0x07);  // max subnormal 7/8 * 2^-6
  CHECK(float_to_e4m3_bits(0.001953125f, nonsat) == 0x01);  // min subnormal 2^-9
  CHECK(float_to_e4m3_bits(0.0f, nonsat) == 0x00);
  CHECK(float_to_e4m3_bits(-0.0f, nonsat) == 0x80);
  CHECK(e4m3_bits_to_float(0x7E) == 448.0f);
  CHECK(e4m3_bits_to_float(0x01) == 0.001953125f);
  CHECK(e4m3_bits_to_float(0x07) == 0.013671875f);
  CHECK(e4m3_bits_to_float(0x78) == 256.0f);  // 0.1111.000: the top exponent holds normal numbers
  CHECK(std::signbit(e4m3_bits_to_float(0x80)));
  CHECK(e4m3_bits_to_float(0x80) == 0.0f);
  CHECK(std::isnan(e4m3_bits_to_float(0x7F)));
  CHECK(std::isnan(e4m3_bits_to_float(0xFF)));
  CHECK(float_to_e4m3_bits(qnan_f32, nonsat) == 0x7F);
  CHECK(float_to_e4m3_bits(qnan_f32, sat) == 0x7F);
  CHECK(float_to_e4m3_bits(-qnan_f32, sat) == 0xFF);
}

TEST_CASE("E4M3: ties to even at every kind of boundary") {
  CHECK(float_to_e4m3_bits(0.0009765625f, nonsat) == 0x00);        // 2^-10: half the min subnormal -> 0
  CHECK(float_to_e4m3_bits(0.0009766f, nonsat) == 0x01);           // just above the half -> min subnormal
  CHECK(float_to_e4m3_bits(-0.0009765625f, nonsat) == 0x80);       // negative tiny -> -0
  CHECK(float_to_e4m3_bits(3 * 0.0009765625f, nonsat) == 0x02);    // 1.5 subnormal steps: tie -> 0x02 (even)
  CHECK(float_to_e4m3_bits(0.0146484375f, nonsat) == 0x08);        // between max subnormal 0x07 and min normal
  CHECK(float_to_e4m3_bits(1.0625f, nonsat) == 0x38);              // 1 + 1/16: tie, 1.000 is even
  CHECK(float_to_e4m3_bits(1.1875f, nonsat) == 0x3A);              // 1.125 (odd) vs 1.25 (even)
  CHECK(float_to_e4m3_bits(17.0f, nonsat) == 0x58);                // 16 vs 18: 16 = 0.1011.000
  CHECK(float_to_e4m3_bits(1.07f, nonsat) == 0x39);                // above the tie -> up
}

TEST_CASE("E4M3: overflow in both saturation modes") {
  // The next step above 448 would be 480 (the NaN code); 464 is the midpoint and ties to 448.
  CHECK(float_to_e4m3_bits(464.0f, nonsat) == 0x7E);
  CHECK(float_to_e4m3_bits(464.0f, sat) == 0x7E);
  CHECK(float_to_e4m3_bits(465.0f, nonsat) == 0x7F);  // rounds past max: NaN
  CHECK(float_to_e4m3_bits(465.0f, sat) == 0x7E);     // clamps to 448
  CHECK(float_to_e4m3_bits(-1e6f, nonsat) == 0xFF);
  CHECK(float_to_e4m3_bits(-1e6f, sat) == 0xFE);
  CHECK(float_to_e4m3_bits(inf_f32, nonsat) == 0x7F);     // no infinity in E4M3: NaN
  CHECK(float_to_e4m3_bits(inf_f32, sat) == 0x7E);
  CHECK(float_to_e4m3_bits(-inf_f32, sat) == 0xFE);
}

TEST_CASE("E5M2: exact values, subnormals, infinities, NaN") {
  // S.EEEEE.MM, bias 15: 1.0 = 0.01111.00
  CHECK(float_to_e5m2_bits(1.0f, nonsat) == 0x3C);
  CHECK(float_to_e5m2_bits(57344.0f, nonsat) == 0x7B);  // 0.11110.11 = 1.75 * 2^15
  CHECK(float_to_e5m2_bits(6.103515625e-05f, nonsat) == 0x04);   // min normal 2^-14
  CHECK(float_to_e5m2_bits(4.57763671875e-05f, nonsat) == 0x03); // max subnormal 3/4 * 2^-14
  CHECK(float_to_e5m2_bits(1.52587890625e-05f, nonsat) == 0x01); // min subnormal 2^-16
  CHECK(float_to_e5m2_bits(-0.0f, nonsat) == 0x80);
  CHECK(float_to_e5m2_bits(inf_f32, nonsat) == 0x7C);
  CHECK(float_to_e5m2_bits(-inf_f32, nonsat) == 0xFC);
  CHECK(e5m2_bits_to_float(0x7C) == inf_f32);
  CHECK(e5m2_bits_to_float(0xFC) == -inf_f32);
  for (int code : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) {
    CHECK(std::isnan(e5m2_bits_to_float(static_cast<uint8_t>(code))));
  }
  CHECK(float_to_e5m2_bits(qnan_f32, nonsat) == 0x7E);  // quiet NaN: top mantissa bit set
  CHECK(float_to_e5m2_bits(qnan_f32, sat) == 0x7E);
  CHECK(e5m2_bits_to_float(0x01) == 1.52587890625e-05f);
}

TEST_CASE("E5M2: ties to even and overflow in both saturation modes") {
  CHECK(float_to_e5m2_bits(7.62939453125e-06f, nonsat) == 0x00);  // 2^-17: half the min subnormal
  CHECK(float_to_e5m2_bits(1.125f, nonsat) == 0x3C);               // 1.0 (even) vs 1.25
  CHECK(float_to_e5m2_bits(1.375f, nonsat) == 0x3E);               // 1.25 (odd) vs 1.5
  // Above 57344 the next step is 2^16 (infinity's code, mantissa 00): the tie 61440 goes there.
  CHECK(float_to_e5m2_bits(61439.0f, nonsat) == 0x7B);
  CHECK(float_to_e5m2_bits(61440.0f, nonsat) == 0x7C);
  CHECK(float_to_e5m2_bits(61440.0f, sat) == 0x7B);
  CHECK(float_to_e5m2_bits(-1e9f, nonsat) == 0xFC);
  CHECK(float_to_e5m2_bits(-1e9f, sat) == 0xFB);
  CHECK(float_to_e5m2_bits(inf_f32, sat) == 0x7B);
  CHECK(float_to_e5m2_bits(-inf_f32, sat) == 0xFB);
}

TEST_CASE("fp16: IEEE binary16 edges") {
  CHECK(float_to_f16_bits(1.0f, nonsat) == 0x3C00);
  CHECK(float_to_f16_bits(65504.0f, nonsat) == 0x7BFF);
  CHECK(float_to_f16_bits(65519.0f, nonsat) == 0x7BFF);
  CHECK(float_to_f16_bits(65520.0f, nonsat) == 0x7C00);  // tie between 65504 (odd) and 2^16: inf
  CHECK(float_to_f16_bits(65520.0f, sat) == 0x7BFF);
  CHECK(float_to_f16_bits(inf_f32, sat) == 0x7BFF);
  CHECK(float_to_f16_bits(-inf_f32, nonsat) == 0xFC00);
  CHECK(float_to_f16_bits(5.9604644775390625e-08f, nonsat) == 0x0001);  // 2^-24
  CHECK(float_to_f16_bits(2.98023223876953125e-08f, nonsat) == 0x0000); // 2^-25 tie -> 0
  CHECK(float_to_f16_bits(8.94069671630859375e-08f, nonsat) == 0x0002); // 1.5 * 2^-24 -> even
  CHECK(float_to_f16_bits(6.103515625e-05f, nonsat) == 0x0400);          // min normal 2^-14
  CHECK(f16_bits_to_float(0x03FF) == 6.0975551605224609375e-05f);         // max subnormal 1023 * 2^-24
  CHECK(float_to_f16_bits(1.0f + 0.00048828125f, nonsat) == 0x3C00);     // 1 + 2^-11: tie -> even
  CHECK(float_to_f16_bits(1.0f + 3 * 0.00048828125f, nonsat) == 0x3C02);
  CHECK(float_to_f16_bits(-0.0f, nonsat) == 0x8000);
  CHECK(float_to_f16_bits(qnan_f32, nonsat) == 0x7E00);
  CHECK(std::isnan(f16_bits_to_float(0x7C01)));
  CHECK(f16_bits_to_float(0xFC00) == -inf_f32);
}

TEST_CASE("bf16: round to nearest even from fp32, NaN stays NaN") {
  CHECK(float_to_bf16_bits(1.0f, nonsat) == 0x3F80);
  CHECK(float_to_bf16_bits(from_bits(0x3F808000), nonsat) == 0x3F80);  // tie, even kept
  CHECK(float_to_bf16_bits(from_bits(0x3F818000), nonsat) == 0x3F82);  // tie, odd rounds up
  CHECK(float_to_bf16_bits(from_bits(0x3F808001), nonsat) == 0x3F81);
  CHECK(float_to_bf16_bits(from_bits(0x7F7F8000), nonsat) == 0x7F80);  // tie at max: inf
  CHECK(float_to_bf16_bits(from_bits(0x7F7F8000), sat) == 0x7F7F);
  CHECK(float_to_bf16_bits(from_bits(0x7F7FFFFF), nonsat) == 0x7F80);  // FLT_MAX overflows bf16
  CHECK(float_to_bf16_bits(from_bits(0xFF7FFFFF), sat) == 0xFF7F);
  CHECK(float_to_bf16_bits(from_bits(0x00000001), nonsat) == 0x0000);  // fp32 subnormals
  CHECK(float_to_bf16_bits(from_bits(0x00008000), nonsat) == 0x0000);
  CHECK(float_to_bf16_bits(from_bits(0x00018000), nonsat) == 0x0002);
  CHECK(float_to_bf16_bits(from_bits(0x00008001), nonsat) == 0x0001);
  CHECK(float_to_bf16_bits(-0.0f, nonsat) == 0x8000);
  CHECK(float_to_bf16_bits(inf_f32, nonsat) == 0x7F80);
  CHECK(float_to_bf16_bits(-inf_f32, sat) == 0xFF7F);
  // A signalling NaN whose payload sits in the low bits must not round to infinity.
  CHECK(float_to_bf16_bits(from_bits(0x7F800001), nonsat) == 0x7FC0);
  CHECK(float_to_bf16_bits(from_bits(0xFF800001), sat) == 0xFFC0);
  CHECK(std::isnan(bf16_bits_to_float(0x7FC0)));
  CHECK(bf16_bits_to_float(0x3F80) == 1.0f);
}

namespace {

// Independent check of every rounding boundary of a format: for each pair of adjacent
// finite codes, values just below, at and above the midpoint must go to the lower code,
// the even code, and the upper code.
void check_all_boundaries(DType dtype, int bits) {
  std::vector<std::pair<double, uint64_t>> finite;
  for (uint64_t code = 0; code < (uint64_t{1} << (bits - 1)); ++code) {  // non-negative codes
    const double v = decode(dtype, code);
    if (std::isfinite(v)) {
      finite.emplace_back(v, code);
    }
  }
  for (size_t i = 0; i < finite.size(); ++i) {
    const auto [value, code] = finite[i];
    REQUIRE(encode(dtype, value, Saturation::non_saturating) == code);
    REQUIRE(encode(dtype, -value, Saturation::non_saturating) == (code | (uint64_t{1} << (bits - 1))));
    if (i + 1 == finite.size()) {
      break;
    }
    const auto [next_value, next_code] = finite[i + 1];
    REQUIRE(next_value > value);
    const double mid = (value + next_value) / 2;
    const double nudge = (next_value - value) / 1024;
    const uint64_t even = (code % 2 == 0) ? code : next_code;
    REQUIRE(encode(dtype, mid, Saturation::non_saturating) == even);
    REQUIRE(encode(dtype, mid - nudge, Saturation::non_saturating) == code);
    REQUIRE(encode(dtype, mid + nudge, Saturation::saturating) == next_code);
  }
}

}  // namespace

TEST_CASE("every rounding boundary of every narrow format ties to even") {
  check_all_boundaries(DType::f8_e4m3, 8);
  check_all_boundaries(DType::f8_e5m2, 8);
  check_all_boundaries(DType::f16, 16);
  check_all_boundaries(DType::bf16, 16);
}

TEST_CASE("bf16 fast path agrees with the exact rounding on fp32 bit patterns") {
  uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;  // fixed-seed LCG covers every exponent
    const float value = from_bits(state);
    if (std::isnan(value)) {
      continue;
    }
    for (Saturation mode : {nonsat, sat}) {
      REQUIRE(float_to_bf16_bits(value, mode) == encode(DType::bf16, value, mode));
    }
  }
}

TEST_CASE("round_trip emulates storing in the format") {
  CHECK(round_trip(DType::bf16, 1.00390625f, nonsat) == 1.0f);  // 1 + 2^-8 ties to 1
  CHECK(round_trip(DType::f8_e4m3, 500.0f, sat) == 448.0f);
  CHECK(std::isnan(round_trip(DType::f8_e4m3, 500.0f, nonsat)));
  CHECK(round_trip(DType::f8_e5m2, 100000.0f, nonsat) == inf_f32);
  CHECK(round_trip(DType::f16, 0.1f, nonsat) == 0.0999755859375f);  // 0x2E66
  CHECK(round_trip(DType::f32, 0.1f, nonsat) == 0.1f);
  CHECK(round_trip(DType::f32, 0.1, nonsat) == static_cast<double>(0.1f));
  // A double just above a bf16 tie rounds up; a detour through float would tie down to even.
  CHECK(round_trip(DType::bf16, 1.0 + 1.0 / 256 + 1e-12, nonsat) == 1.0078125);
}

TEST_CASE("limits and ulp of each format") {
  CHECK(max_finite(DType::f8_e4m3) == 448.0);
  CHECK(max_finite(DType::f8_e5m2) == 57344.0);
  CHECK(max_finite(DType::f16) == 65504.0);
  CHECK(max_finite(DType::bf16) == static_cast<double>(from_bits(0x7F7F0000)));
  CHECK(ulp(DType::f8_e4m3, 1.0) == 0.125);
  CHECK(ulp(DType::f8_e4m3, 300.0) == 32.0);
  CHECK(ulp(DType::f8_e4m3, 1e-4) == 0.001953125);  // subnormal spacing
  CHECK(ulp(DType::f8_e4m3, 0.0) == 0.001953125);
  CHECK(ulp(DType::f8_e5m2, 1.0) == 0.25);
  CHECK(ulp(DType::bf16, 1.0) == 0.0078125);
  CHECK(ulp(DType::f32, 1.0) == 1.0 / (1 << 23));
}

TEST_CASE("dtype names parse in their usual spellings") {
  CHECK(parse_dtype("fp32").value() == DType::f32);
  CHECK(parse_dtype("float32").value() == DType::f32);
  CHECK(parse_dtype("F32").value() == DType::f32);
  CHECK(parse_dtype("bfloat16").value() == DType::bf16);
  CHECK(parse_dtype("e4m3").value() == DType::f8_e4m3);
  CHECK(parse_dtype("float8_e4m3fn").value() == DType::f8_e4m3);
  CHECK(parse_dtype("fp8_e5m2").value() == DType::f8_e5m2);
  CHECK(parse_dtype("half").value() == DType::f16);
  auto bad = parse_dtype("int8");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message.find("fp8_e4m3") != std::string::npos);
  for (DType d : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8_e4m3, DType::f8_e5m2}) {
    CHECK(parse_dtype(to_string(d)).value() == d);
  }
  CHECK(size_in_bytes(DType::bf16) == 2);
  CHECK(size_in_bytes(DType::f8_e5m2) == 1);
  CHECK(size_in_bytes(DType::f64) == 8);
}
