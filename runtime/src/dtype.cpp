// The binding dtype table; see dtype.h.
#include "dtype.h"

namespace tte {
namespace {

using executorch::aten::ScalarType;

struct Row {
  DType dtype;
  const char* name;
  size_t size;
  ScalarType scalar;
  int32_t trt;
};

// In DType's order (row(d) indexes it).
constexpr Row kTable[] = {
    {DType::Float32, "float32", 4, ScalarType::Float, trt_type::kFloat},
    {DType::Float16, "float16", 2, ScalarType::Half, trt_type::kHalf},
    {DType::BFloat16, "bfloat16", 2, ScalarType::BFloat16, trt_type::kBF16},
    {DType::Int64, "int64", 8, ScalarType::Long, trt_type::kInt64},
    {DType::Int32, "int32", 4, ScalarType::Int, trt_type::kInt32},
    {DType::Int8, "int8", 1, ScalarType::Char, trt_type::kInt8},
    {DType::UInt8, "uint8", 1, ScalarType::Byte, trt_type::kUInt8},
    {DType::Bool, "bool", 1, ScalarType::Bool, trt_type::kBool},
    {DType::Float64, "float64", 8, ScalarType::Double, trt_type::kNone},
};

constexpr bool in_enum_order() {
  for (size_t i = 0; i < sizeof kTable / sizeof kTable[0]; ++i) {
    if (static_cast<size_t>(kTable[i].dtype) != i) return false;
  }
  return true;
}
static_assert(in_enum_order(), "kTable must list the dtypes in DType's order");

const Row& row(DType d) { return kTable[static_cast<size_t>(d)]; }

template <class Pred>
bool find(Pred pred, DType& out) {
  for (const Row& r : kTable) {
    if (pred(r)) {
      out = r.dtype;
      return true;
    }
  }
  return false;
}

}  // namespace

bool dtype_from_name(const std::string& name, DType& out) {
  return find([&](const Row& r) { return name == r.name; }, out);
}

bool dtype_from_trt(int32_t trt, DType& out) {
  return trt != trt_type::kNone && find([&](const Row& r) { return r.trt == trt; }, out);
}

const char* dtype_name(DType d) { return row(d).name; }
size_t dtype_size(DType d) { return row(d).size; }
ScalarType dtype_scalar_type(DType d) { return row(d).scalar; }

std::string dtype_known_names() {
  std::string s;
  for (const Row& r : kTable) s += (s.empty() ? "" : ", ") + std::string(r.name);
  return s;
}

}  // namespace tte
