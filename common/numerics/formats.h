// Number formats a chip computes in, and exact conversions between them and float.
//
// Every conversion to a narrower format rounds to nearest, ties to even, at every boundary
// (subnormals, the subnormal/normal edge, the largest finite value). The 8-bit formats follow
// the OCP 8-bit floating point specification v1.0 (also what ml_dtypes implements):
//   E4M3 ("e4m3fn"): bias 7, no infinity, NaN only S.1111.111, max 448, min subnormal 2^-9.
//   E5M2:            bias 15, IEEE-style infinity and NaN, max 57344, min subnormal 2^-16.
// A value whose rounded magnitude exceeds the format's largest finite value overflows:
//   non-saturating: to infinity where the format has one (fp16, bf16, E5M2), else NaN (E4M3);
//   saturating:     to the largest finite value of the same sign (infinite inputs too).
// NaN input gives a quiet NaN of the same sign in both modes.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/enum_names.h"
#include "common/error.h"

namespace kiln::numerics {

enum class DType { f64, f32, f16, bf16, f8_e4m3, f8_e5m2 };
constexpr EnumTable<DType, 6> enum_names(DType) {
  return {{
      {DType::f64, "fp64"},
      {DType::f32, "fp32"},
      {DType::f16, "fp16"},
      {DType::bf16, "bf16"},
      {DType::f8_e4m3, "fp8_e4m3"},
      {DType::f8_e5m2, "fp8_e5m2"},
  }};
}

enum class Saturation { non_saturating, saturating };

// Accepts the usual spellings, case-insensitively: "fp32", "f32", "float32", "float";
// "bf16", "bfloat16"; "fp8_e4m3", "e4m3", "e4m3fn", "float8_e4m3fn"; "fp8_e5m2", "e5m2"; ...
Result<DType> parse_dtype(std::string_view name);

// Canonical name: "fp64", "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2".
inline std::string_view to_string(DType value) { return enum_name(value); }

// Bytes one element occupies in a tensor file.
int size_in_bytes(DType dtype);

bool is_fp8(DType dtype);

// Largest finite value of the format (for f64: DBL_MAX).
double max_finite(DType dtype);

// Distance from |value| to the next representable magnitude away from zero, within the
// format's finite range: the smallest subnormal below the normal range, the spacing at the
// largest finite value above it. For f64 and f32 the spacing of that format.
double ulp(DType dtype, double value);

uint16_t float_to_bf16_bits(float value, Saturation saturation);
float bf16_bits_to_float(uint16_t bits);

uint16_t float_to_f16_bits(float value, Saturation saturation);
float f16_bits_to_float(uint16_t bits);

uint8_t float_to_e4m3_bits(float value, Saturation saturation);
float e4m3_bits_to_float(uint8_t bits);

uint8_t float_to_e5m2_bits(float value, Saturation saturation);
float e5m2_bits_to_float(uint8_t bits);

// Rounds a double straight to a narrow format (one rounding, no detour through float, so no
// double rounding). Returns the format's bit pattern in the low bits. For f32 and f64 the
// IEEE bits; overflow to f32 follows the saturation mode like the narrow formats.
uint64_t encode(DType dtype, double value, Saturation saturation);

// Decodes a bit pattern (low bits) of the format exactly.
double decode(DType dtype, uint64_t bits);

// The value after being stored in the format and read back: emulates a chip that keeps
// results in bf16, fp16 or fp8. Identity for f32 and f64.
float round_trip(DType dtype, float value, Saturation saturation);

// Same for a double (rounded once, straight to the format).
double round_trip(DType dtype, double value, Saturation saturation);

}  // namespace kiln::numerics
