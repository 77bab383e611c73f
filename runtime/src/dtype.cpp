// Binding dtype table; see tte/dtype.h (kept equal to python's blob.DTYPES).
#include <tte/dtype.h>

namespace tte {
namespace {

struct Row {
  DType dtype;
  const char* name;
  size_t size;
  executorch::aten::ScalarType scalar;
};

using executorch::aten::ScalarType;
constexpr Row kTable[] = {
    {DType::Float32, "float32", 4, ScalarType::Float},
    {DType::Float16, "float16", 2, ScalarType::Half},
    {DType::BFloat16, "bfloat16", 2, ScalarType::BFloat16},
    {DType::Int64, "int64", 8, ScalarType::Long},
    {DType::Int32, "int32", 4, ScalarType::Int},
    {DType::Int8, "int8", 1, ScalarType::Char},
    {DType::UInt8, "uint8", 1, ScalarType::Byte},
    {DType::Bool, "bool", 1, ScalarType::Bool},
    {DType::Float64, "float64", 8, ScalarType::Double},
};

const Row& row(DType d) { return kTable[static_cast<size_t>(d)]; }

}  // namespace

bool dtype_from_name(const std::string& name, DType& out) {
  for (const Row& r : kTable) {
    if (name == r.name) {
      out = r.dtype;
      return true;
    }
  }
  return false;
}

const char* dtype_name(DType d) { return row(d).name; }
size_t dtype_size(DType d) { return row(d).size; }
executorch::aten::ScalarType dtype_scalar_type(DType d) { return row(d).scalar; }
const char* dtype_known_names() {
  return "float32, float16, bfloat16, int64, int32, int8, uint8, bool, float64";
}

}  // namespace tte
