// Kernel-call and tensor-storage checks of a reference payload; see tte/payload_check.h. Reads
// only what it needs of executorch's schema/program.fbs (field ids: Program.execution_plan = 1;
// ExecutionPlan.name = 0, .values = 2, .inputs = 3, .outputs = 4, .chains = 5, .operators = 6;
// Chain.instructions = 2; Instruction.instr_args_type = 0, .instr_args = 1; KernelCall.op_index
// = 0; Operator.name = 0, .overload = 1; EValue.val_type = 0, .val = 1; Tensor.sizes = 2,
// .data_buffer_idx = 5, .allocation_info = 6, .extra_tensor_info = 9; the union members
// KernelCall and Tensor are types 1 and 5), with a bounds check before every read.
#include <tte/common.h>
#include <tte/payload_check.h>

#include <cstdint>
#include <cstring>

namespace tte {
namespace {

// ExecuTorch resolves "name.overload" in a 100-byte buffer and refuses longer names.
constexpr size_t kOperatorNameBuffer = 100;

// A bounds-checked flatbuffer reader: every accessor returns false when the read would leave the
// buffer; positions are byte offsets into it.
class Flatbuffer {
 public:
  Flatbuffer(const void* d, size_t n) : d_(static_cast<const uint8_t*>(d)), n_(n) {}

  bool u8(size_t at, uint8_t& v) const {
    if (at >= n_) return false;
    v = d_[at];
    return true;
  }
  bool u16(size_t at, uint16_t& v) const {
    if (at > n_ || n_ - at < 2) return false;
    v = static_cast<uint16_t>(d_[at] | d_[at + 1] << 8);
    return true;
  }
  bool u32(size_t at, uint32_t& v) const {
    if (at > n_ || n_ - at < 4) return false;
    v = uint32_t(d_[at]) | uint32_t(d_[at + 1]) << 8 | uint32_t(d_[at + 2]) << 16 |
        uint32_t(d_[at + 3]) << 24;
    return true;
  }
  // The position a uoffset stored at `at` points to.
  bool deref(size_t at, size_t& target) const {
    uint32_t off = 0;
    if (!u32(at, off) || off > n_ - at) return false;
    target = at + off;
    return true;
  }
  // Where field `id` of the table at `table` is stored; 0 when the field is absent.
  bool field(size_t table, unsigned id, size_t& at) const {
    uint32_t raw = 0;
    if (!u32(table, raw)) return false;
    const int64_t vtable = static_cast<int64_t>(table) - static_cast<int32_t>(raw);
    if (vtable < 0 || static_cast<uint64_t>(vtable) >= n_) return false;
    uint16_t vsize = 0, off = 0;
    if (!u16(static_cast<size_t>(vtable), vsize)) return false;
    at = 0;
    if (4 + 2 * id + 2 > vsize) return true;
    if (!u16(static_cast<size_t>(vtable) + 4 + 2 * id, off)) return false;
    if (off != 0) at = table + off;
    return true;
  }
  // The table or vector a field refers to; 0 when the field is absent.
  bool ref_field(size_t table, unsigned id, size_t& target) const {
    size_t at = 0;
    if (!field(table, id, at)) return false;
    target = 0;
    return at == 0 || deref(at, target);
  }
  // A vector at `vec`: its length, element i at vec + 4 + i * elem (checked here once).
  bool vector(size_t vec, size_t elem, uint32_t& count) const {
    if (!u32(vec, count)) return false;
    return count <= (n_ - vec - 4) / elem;
  }
  // A string at `s`: its bytes and length (not copied).
  bool string(size_t s, const char*& text, uint32_t& len) const {
    if (!vector(s, 1, len)) return false;
    text = reinterpret_cast<const char*>(d_ + s + 4);
    return true;
  }

 private:
  const uint8_t* d_;
  size_t n_;
};

constexpr unsigned kProgramPlans = 1, kPlanName = 0, kPlanChains = 5, kPlanOperators = 6;
constexpr unsigned kChainInstructions = 2, kInstrType = 0, kInstrArgs = 1;
constexpr unsigned kKernelOpIndex = 0, kOperatorName = 0, kOperatorOverload = 1;
constexpr uint8_t kKernelCallType = 1;
constexpr unsigned kPlanValues = 2, kPlanInputs = 3, kPlanOutputs = 4, kValueType = 0, kValue = 1;
constexpr unsigned kTensorSizes = 2, kTensorDataBuffer = 5, kTensorAllocation = 6;
constexpr unsigned kTensorExtraInfo = 9;
constexpr uint8_t kTensorType = 5;

// The int32 vector field `id` of `table` contains `v`.
bool int_vector_has(const Flatbuffer& fb, size_t table, unsigned id, uint32_t v, bool& has) {
  size_t vec = 0;
  uint32_t n = 0;
  has = false;
  if (!fb.ref_field(table, id, vec)) return false;
  if (vec == 0) return true;
  if (!fb.vector(vec, 4, n)) return false;
  for (uint32_t i = 0; i < n && !has; ++i) {
    uint32_t x = 0;
    if (!fb.u32(vec + 4 + 4 * size_t(i), x)) return false;
    has = x == v;
  }
  return true;
}

// A tensor value has storage: memory planned, constant data, external data, or zero elements.
bool tensor_has_storage(const Flatbuffer& fb, size_t tensor, bool& has) {
  size_t alloc = 0, extra = 0, data_at = 0, sizes = 0;
  uint32_t data_idx = 0, n = 0;
  if (!fb.field(tensor, kTensorAllocation, alloc) || !fb.field(tensor, kTensorExtraInfo, extra) ||
      !fb.field(tensor, kTensorDataBuffer, data_at) ||
      (data_at != 0 && !fb.u32(data_at, data_idx)) || !fb.ref_field(tensor, kTensorSizes, sizes) ||
      (sizes != 0 && !fb.vector(sizes, 4, n))) {
    return false;
  }
  has = alloc != 0 || extra != 0 || data_idx > 0;
  for (uint32_t i = 0; i < n && !has; ++i) {
    uint32_t d = 0;
    if (!fb.u32(sizes + 4 + 4 * size_t(i), d)) return false;
    has = d == 0;
  }
  return true;
}

// Every tensor value of `plan` has storage or is a method input/output (the engine binds those).
// ExecuTorch leaves any other tensor's data null, and kernels then write through it.
bool tensors_have_storage(const Flatbuffer& fb, size_t plan, const char* method,
                          const std::string& unreadable, std::string& why) {
  size_t values = 0;
  uint32_t n = 0;
  if (!fb.ref_field(plan, kPlanValues, values) || (values != 0 && !fb.vector(values, 4, n))) {
    return why = unreadable, false;
  }
  for (uint32_t v = 0; v < n; ++v) {
    size_t value = 0, type_at = 0, tensor = 0;
    uint8_t type = 0;
    bool has = false, in = false, out = false;
    if (!fb.deref(values + 4 + 4 * size_t(v), value) || !fb.field(value, kValueType, type_at) ||
        (type_at != 0 && !fb.u8(type_at, type))) {
      return why = unreadable, false;
    }
    if (type != kTensorType) continue;
    if (!fb.ref_field(value, kValue, tensor) || tensor == 0 ||
        !tensor_has_storage(fb, tensor, has) ||
        !int_vector_has(fb, plan, kPlanInputs, v, in) ||
        !int_vector_has(fb, plan, kPlanOutputs, v, out)) {
      return why = unreadable, false;
    }
    if (!has && !in && !out) {
      why = format("reference payload: method '%s' value %u is a tensor with no storage (not "
                   "memory planned, not constant data, not a method input or output)", method, v);
      return false;
    }
  }
  return true;
}

// The execution plan named `method`, or 0.
bool find_plan(const Flatbuffer& fb, const char* method, size_t& plan) {
  size_t root = 0, plans = 0;
  uint32_t count = 0;
  if (!fb.deref(0, root) || !fb.ref_field(root, kProgramPlans, plans)) return false;
  plan = 0;
  if (plans == 0) return true;
  if (!fb.vector(plans, 4, count)) return false;
  for (uint32_t i = 0; i < count; ++i) {
    size_t p = 0, name = 0;
    const char* text = nullptr;
    uint32_t len = 0;
    if (!fb.deref(plans + 4 + 4 * size_t(i), p) || !fb.ref_field(p, kPlanName, name)) return false;
    if (name == 0) continue;
    if (!fb.string(name, text, len)) return false;
    if (len == std::strlen(method) && std::memcmp(text, method, len) == 0) {
      plan = p;
      return true;
    }
  }
  return true;
}

// Operator `i` has a name, and "name.overload" fits ExecuTorch's buffer.
bool operator_named(const Flatbuffer& fb, size_t ops, uint32_t i, std::string& what) {
  size_t op = 0, name = 0, overload = 0;
  const char* text = nullptr;
  uint32_t name_len = 0, overload_len = 0;
  if (!fb.deref(ops + 4 + 4 * size_t(i), op) || !fb.ref_field(op, kOperatorName, name) ||
      !fb.ref_field(op, kOperatorOverload, overload)) {
    what = "is unreadable";
    return false;
  }
  if (name == 0 || !fb.string(name, text, name_len)) {
    what = "has no name";
    return false;
  }
  if (overload != 0 && !fb.string(overload, text, overload_len)) {
    what = "has an unreadable overload name";
    return false;
  }
  if (size_t(name_len) + 1 + overload_len >= kOperatorNameBuffer) {
    what = format("has a %u-byte name, longer than ExecuTorch resolves", name_len + overload_len);
    return false;
  }
  return true;
}

}  // namespace

bool check_kernel_calls(const void* data, size_t size, const char* method, std::string& why) {
  const Flatbuffer fb(data, size);
  const std::string unreadable = format("reference payload: the flatbuffer of method '%s' is "
                                        "unreadable (an offset leaves the payload)", method);
  size_t plan = 0, chains = 0, ops = 0;
  uint32_t n_chains = 0, n_ops = 0;
  if (!find_plan(fb, method, plan)) return why = unreadable, false;
  if (plan == 0) return true;  // no such method: Program::method_meta reports it
  if (!tensors_have_storage(fb, plan, method, unreadable, why)) return false;
  if (!fb.ref_field(plan, kPlanChains, chains) || !fb.ref_field(plan, kPlanOperators, ops) ||
      (chains != 0 && !fb.vector(chains, 4, n_chains)) || (ops != 0 && !fb.vector(ops, 4, n_ops))) {
    return why = unreadable, false;
  }
  for (uint32_t c = 0; c < n_chains; ++c) {
    size_t chain = 0, instrs = 0;
    uint32_t n_instrs = 0;
    if (!fb.deref(chains + 4 + 4 * size_t(c), chain) ||
        !fb.ref_field(chain, kChainInstructions, instrs) ||
        (instrs != 0 && !fb.vector(instrs, 4, n_instrs))) {
      return why = unreadable, false;
    }
    for (uint32_t k = 0; k < n_instrs; ++k) {
      size_t instr = 0, type_at = 0, args = 0, index_at = 0;
      uint8_t type = 0;
      uint32_t raw_index = 0;
      if (!fb.deref(instrs + 4 + 4 * size_t(k), instr) || !fb.field(instr, kInstrType, type_at) ||
          (type_at != 0 && !fb.u8(type_at, type))) {
        return why = unreadable, false;
      }
      if (type != kKernelCallType) {
        static const char* const kNames[] = {"an empty", "a kernel", "a delegate", "a move",
                                             "a jump", "a free"};
        why = format("reference payload: method '%s' instruction %u:%u is %s call; the reference "
                     "engine runs straight-line kernel calls only (a free, move, jump or nested "
                     "delegate call could leave a tensor it later uses without data)", method, c,
                     k, type < 6 ? kNames[type] : "an unknown");
        return false;
      }
      if (!fb.ref_field(instr, kInstrArgs, args) || args == 0 ||
          !fb.field(args, kKernelOpIndex, index_at) ||
          (index_at != 0 && !fb.u32(index_at, raw_index))) {
        return why = unreadable, false;
      }
      const int32_t index = static_cast<int32_t>(raw_index);  // absent: 0
      std::string what;
      if (index < 0 || static_cast<uint32_t>(index) >= n_ops) {
        why = format("reference payload: method '%s' instruction %u:%u calls operator %d, but "
                     "the method has %u operators", method, c, k, index, n_ops);
        return false;
      }
      if (!operator_named(fb, ops, static_cast<uint32_t>(index), what)) {
        why = format("reference payload: method '%s' instruction %u:%u calls operator %d, which "
                     "%s", method, c, k, index, what.c_str());
        return false;
      }
    }
  }
  return true;
}

}  // namespace tte
