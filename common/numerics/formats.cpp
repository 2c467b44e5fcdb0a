#include "common/numerics/formats.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <limits>
#include <string>

namespace kiln::numerics {
namespace {

// A binary floating point format narrower than double: sign, exponent field, trailing
// significand field. `ieee_specials` reserves the all-ones exponent for infinity and NaN;
// otherwise (E4M3 "fn") only all-ones exponent and mantissa is NaN and there is no infinity.
struct Spec {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool ieee_specials;
};

constexpr Spec spec_of(DType dtype) {
  switch (dtype) {
    case DType::f64: return {11, 52, 1023, true};
    case DType::f32: return {8, 23, 127, true};
    case DType::f16: return {5, 10, 15, true};
    case DType::bf16: return {8, 7, 127, true};
    case DType::f8_e4m3: return {4, 3, 7, false};
    case DType::f8_e5m2: return {5, 2, 15, true};
  }
  return {8, 23, 127, true};
}

constexpr int min_normal_exponent(const Spec& s) { return 1 - s.bias; }

constexpr uint64_t exponent_all_ones(const Spec& s) { return (uint64_t{1} << s.exponent_bits) - 1; }

// Unbiased exponent of the largest finite value.
constexpr int max_exponent(const Spec& s) {
  return static_cast<int>(exponent_all_ones(s)) - s.bias - (s.ieee_specials ? 1 : 0);
}

// Largest finite trailing significand at max_exponent: all ones, except in "fn" formats
// where all ones at the top exponent is NaN.
constexpr uint64_t max_mantissa(const Spec& s) {
  uint64_t all = (uint64_t{1} << s.mantissa_bits) - 1;
  return s.ieee_specials ? all : all - 1;
}

uint64_t sign_mask(const Spec& s) { return uint64_t{1} << (s.exponent_bits + s.mantissa_bits); }

uint64_t max_finite_bits(const Spec& s) {
  return (static_cast<uint64_t>(max_exponent(s) + s.bias) << s.mantissa_bits) | max_mantissa(s);
}

uint64_t infinity_bits(const Spec& s) { return exponent_all_ones(s) << s.mantissa_bits; }

// Quiet NaN: IEEE formats set the top mantissa bit; "fn" formats have only all ones.
uint64_t nan_bits(const Spec& s) {
  if (s.ieee_specials) {
    return infinity_bits(s) | (uint64_t{1} << (s.mantissa_bits - 1));
  }
  return (exponent_all_ones(s) << s.mantissa_bits) | ((uint64_t{1} << s.mantissa_bits) - 1);
}

double max_finite_value(const Spec& s) {
  double significand = static_cast<double>((uint64_t{1} << s.mantissa_bits) + max_mantissa(s));
  return std::ldexp(significand, max_exponent(s) - s.mantissa_bits);
}

uint64_t overflow_bits(const Spec& s, uint64_t sign, Saturation saturation) {
  if (saturation == Saturation::saturating) {
    return sign | max_finite_bits(s);
  }
  return sign | (s.ieee_specials ? infinity_bits(s) : nan_bits(s));
}

uint64_t encode_narrow(const Spec& s, double value, Saturation saturation) {
  const uint64_t sign = std::signbit(value) ? sign_mask(s) : 0;
  if (std::isnan(value)) {
    return sign | nan_bits(s);
  }
  if (std::isinf(value)) {
    return overflow_bits(s, sign, saturation);
  }
  const double magnitude = std::fabs(value);
  if (magnitude == 0.0) {
    return sign;
  }
  int frexp_exponent = 0;
  std::frexp(magnitude, &frexp_exponent);
  const int floor_log2 = frexp_exponent - 1;
  if (floor_log2 > max_exponent(s)) {
    // At least 2^(max_exponent+1), beyond every finite value even after rounding down.
    return overflow_bits(s, sign, saturation);
  }
  // Below the normal range the spacing stays that of the smallest normal binade.
  int exponent = std::max(floor_log2, min_normal_exponent(s));
  const int quantum_exponent = exponent - s.mantissa_bits;
  // Scaling by a power of two is exact, so `scaled` and its fraction are exact too.
  const double scaled = std::ldexp(magnitude, -quantum_exponent);
  const double floor_scaled = std::floor(scaled);
  const double fraction = scaled - floor_scaled;
  uint64_t significand = static_cast<uint64_t>(floor_scaled);
  if (fraction > 0.5 || (fraction == 0.5 && (significand & 1) != 0)) {
    ++significand;
  }
  if (significand == 0) {
    return sign;
  }
  const uint64_t implicit_one = uint64_t{1} << s.mantissa_bits;
  if (significand == 2 * implicit_one) {
    // Rounded up into the next binade.
    significand = implicit_one;
    ++exponent;
  }
  if (significand < implicit_one) {
    return sign | significand;  // subnormal: exponent field 0
  }
  const uint64_t exponent_field = static_cast<uint64_t>(exponent + s.bias);
  const uint64_t bits = (exponent_field << s.mantissa_bits) | (significand - implicit_one);
  if (exponent > max_exponent(s) || bits > max_finite_bits(s)) {
    return overflow_bits(s, sign, saturation);
  }
  return sign | bits;
}

double decode_narrow(const Spec& s, uint64_t bits) {
  const bool negative = (bits & sign_mask(s)) != 0;
  const uint64_t exponent_field = (bits >> s.mantissa_bits) & exponent_all_ones(s);
  const uint64_t mantissa = bits & ((uint64_t{1} << s.mantissa_bits) - 1);
  double magnitude = 0.0;
  if (exponent_field == exponent_all_ones(s) && s.ieee_specials) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent_field == exponent_all_ones(s) && mantissa == (uint64_t{1} << s.mantissa_bits) - 1) {
    magnitude = std::numeric_limits<double>::quiet_NaN();
  } else if (exponent_field == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), min_normal_exponent(s) - s.mantissa_bits);
  } else {
    const double significand = static_cast<double>((uint64_t{1} << s.mantissa_bits) + mantissa);
    magnitude = std::ldexp(significand, static_cast<int>(exponent_field) - s.bias - s.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

Result<DType> parse_dtype(std::string_view name) {
  const std::string key = lower(name);
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias aliases[] = {
      {"fp64", DType::f64},         {"f64", DType::f64},           {"float64", DType::f64},
      {"double", DType::f64},       {"fp32", DType::f32},          {"f32", DType::f32},
      {"float32", DType::f32},      {"float", DType::f32},         {"fp16", DType::f16},
      {"f16", DType::f16},          {"float16", DType::f16},       {"half", DType::f16},
      {"bf16", DType::bf16},        {"bfloat16", DType::bf16},     {"fp8_e4m3", DType::f8_e4m3},
      {"f8_e4m3", DType::f8_e4m3},  {"e4m3", DType::f8_e4m3},      {"e4m3fn", DType::f8_e4m3},
      {"fp8_e4m3fn", DType::f8_e4m3}, {"f8_e4m3fn", DType::f8_e4m3}, {"float8_e4m3fn", DType::f8_e4m3},
      {"fp8_e5m2", DType::f8_e5m2}, {"f8_e5m2", DType::f8_e5m2},   {"e5m2", DType::f8_e5m2},
      {"float8_e5m2", DType::f8_e5m2},
  };
  for (const Alias& alias : aliases) {
    if (alias.name == key) {
      return alias.dtype;
    }
  }
  return fail(Errc::invalid_argument,
              "unknown dtype '" + std::string(name) +
                  "'; use one of fp64, fp32, fp16, bf16, fp8_e4m3 (e4m3), fp8_e5m2 (e5m2)");
}

int size_in_bytes(DType dtype) {
  const Spec s = spec_of(dtype);
  return (1 + s.exponent_bits + s.mantissa_bits) / 8;
}

bool is_fp8(DType dtype) { return dtype == DType::f8_e4m3 || dtype == DType::f8_e5m2; }

double max_finite(DType dtype) {
  if (dtype == DType::f64) {
    return DBL_MAX;
  }
  return max_finite_value(spec_of(dtype));
}

double ulp(DType dtype, double value) {
  const Spec s = spec_of(dtype);
  const double magnitude = std::fabs(value);
  if (std::isnan(magnitude)) {
    return magnitude;
  }
  int exponent = max_exponent(s);
  if (magnitude < max_finite(dtype)) {
    int frexp_exponent = 0;
    std::frexp(magnitude, &frexp_exponent);
    exponent = magnitude == 0.0 ? min_normal_exponent(s)
                                : std::max(frexp_exponent - 1, min_normal_exponent(s));
  }
  return std::ldexp(1.0, exponent - s.mantissa_bits);
}

uint64_t encode(DType dtype, double value, Saturation saturation) {
  if (dtype == DType::f64) {
    return std::bit_cast<uint64_t>(value);
  }
  return encode_narrow(spec_of(dtype), value, saturation);
}

double decode(DType dtype, uint64_t bits) {
  if (dtype == DType::f64) {
    return std::bit_cast<double>(bits);
  }
  if (dtype == DType::f32) {
    return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  }
  return decode_narrow(spec_of(dtype), bits);
}

uint16_t float_to_bf16_bits(float value, Saturation saturation) {
  // The hot path of bf16 emulation: round the top 16 bits of the float in integer arithmetic.
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) {
    return sign | 0x7FC0u;  // NaN; adding the rounding bias could otherwise turn it into inf
  }
  if (magnitude == 0x7F800000u) {
    return saturation == Saturation::saturating ? static_cast<uint16_t>(sign | 0x7F7Fu)
                                                : static_cast<uint16_t>(sign | 0x7F80u);
  }
  const uint32_t lowest_kept_bit = (magnitude >> 16) & 1u;
  const uint16_t rounded = static_cast<uint16_t>((magnitude + 0x7FFFu + lowest_kept_bit) >> 16);
  if (rounded == 0x7F80u && saturation == Saturation::saturating) {
    return sign | 0x7F7Fu;
  }
  return sign | rounded;
}

float bf16_bits_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t float_to_f16_bits(float value, Saturation saturation) {
  return static_cast<uint16_t>(encode(DType::f16, value, saturation));
}

float f16_bits_to_float(uint16_t bits) { return static_cast<float>(decode(DType::f16, bits)); }

uint8_t float_to_e4m3_bits(float value, Saturation saturation) {
  return static_cast<uint8_t>(encode(DType::f8_e4m3, value, saturation));
}

float e4m3_bits_to_float(uint8_t bits) { return static_cast<float>(decode(DType::f8_e4m3, bits)); }

uint8_t float_to_e5m2_bits(float value, Saturation saturation) {
  return static_cast<uint8_t>(encode(DType::f8_e5m2, value, saturation));
}

float e5m2_bits_to_float(uint8_t bits) { return static_cast<float>(decode(DType::f8_e5m2, bits)); }

float round_trip(DType dtype, float value, Saturation saturation) {
  switch (dtype) {
    case DType::f64:
    case DType::f32: return value;
    case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(value, saturation));
    default: return static_cast<float>(decode(dtype, encode(dtype, value, saturation)));
  }
}

double round_trip(DType dtype, double value, Saturation saturation) {
  if (dtype == DType::f64) {
    return value;
  }
  return decode(dtype, encode(dtype, value, saturation));
}

}  // namespace kiln::numerics
