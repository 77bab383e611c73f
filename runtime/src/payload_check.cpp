// Kernel-call and tensor-storage checks of a reference payload; see tte/payload_check.h. Reads
// only what it needs of executorch's schema/program.fbs (field ids: Program.execution_plan = 1;
// ExecutionPlan.name = 0, .values = 2, .inputs = 3, .outputs = 4, .chains = 5, .operators = 6;
// Chain.instructions = 2; Instruction.instr_args_type = 0, .instr_args = 1; KernelCall.op_index
// = 0; Operator.name = 0, .overload = 1; EValue.val_type = 0, .val = 1; Tensor.sizes = 2,
// .data_buffer_idx = 5, .allocation_info = 6, .extra_tensor_info = 9; the union members
// KernelCall and Tensor are types 1 and 5), with a bounds check before every read.
#include "payload_check.h"
#include "common.h"

#include <cstdint>
#include <cstring>
#include <vector>

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
constexpr unsigned kTensorExtraInfo = 9, kKernelArgs = 1, kListItems = 0;
constexpr uint8_t kTensorType = 5, kTensorListType = 10, kOptionalTensorListType = 11;
// ExecuTorch's view op: its output shares its input's data (set when it runs).
constexpr const char* kViewOperator = "executorch_prim::et_view";

// The int32 vector field `id` of `table`, appended to `out` (absent: nothing).
bool int_vector(const Flatbuffer& fb, size_t table, unsigned id, std::vector<int32_t>& out) {
  size_t vec = 0;
  uint32_t n = 0;
  if (!fb.ref_field(table, id, vec)) return false;
  if (vec == 0) return true;
  if (!fb.vector(vec, 4, n)) return false;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t x = 0;
    if (!fb.u32(vec + 4 + 4 * size_t(i), x)) return false;
    out.push_back(static_cast<int32_t>(x));
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

// What the instructions may pass: per value, whether it is a tensor and whether it has data
// before the first instruction runs (storage, or a method input/output the engine binds), and the
// tensor indices a tensor list holds.
struct Values {
  std::vector<uint8_t> tensor, data;
  std::vector<std::vector<int32_t>> lists;
};

bool read_values(const Flatbuffer& fb, size_t plan, Values& out) {
  size_t values = 0;
  uint32_t n = 0;
  if (!fb.ref_field(plan, kPlanValues, values) || (values != 0 && !fb.vector(values, 4, n))) {
    return false;
  }
  out.tensor.assign(n, 0);
  out.data.assign(n, 0);
  out.lists.assign(n, {});
  for (uint32_t v = 0; v < n; ++v) {
    size_t value = 0, type_at = 0, val = 0;
    uint8_t type = 0;
    if (!fb.deref(values + 4 + 4 * size_t(v), value) || !fb.field(value, kValueType, type_at) ||
        (type_at != 0 && !fb.u8(type_at, type)) || !fb.ref_field(value, kValue, val)) {
      return false;
    }
    if (val == 0) continue;
    if (type == kTensorType) {
      bool has = false;
      if (!tensor_has_storage(fb, val, has)) return false;
      out.tensor[v] = 1;
      out.data[v] = has;
    } else if (type == kTensorListType || type == kOptionalTensorListType) {
      if (!int_vector(fb, val, kListItems, out.lists[v])) return false;
    }
  }
  std::vector<int32_t> io;
  if (!int_vector(fb, plan, kPlanInputs, io) || !int_vector(fb, plan, kPlanOutputs, io)) {
    return false;
  }
  for (int32_t v : io) {
    if (v >= 0 && static_cast<uint32_t>(v) < n) out.data[v] = 1;
  }
  return true;
}

// The tensor value an argument passes that has no data yet, or -1 (a list: its first such item).
int64_t dataless_arg(const Values& values, int32_t arg) {
  if (arg < 0 || static_cast<size_t>(arg) >= values.tensor.size()) return -1;
  if (values.tensor[arg]) return values.data[arg] ? -1 : arg;
  for (int32_t item : values.lists[arg]) {
    if (item >= 0 && static_cast<size_t>(item) < values.tensor.size() && values.tensor[item] &&
        !values.data[item]) {
      return item;
    }
  }
  return -1;
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
bool operator_named(const Flatbuffer& fb, size_t ops, uint32_t i, std::string& what,
                    std::string& name_out) {
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
  name_out.assign(text, name_len);
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

// The instructions of one method, in order: kernel calls of named operators, whose tensor
// arguments have data by the time they run.
class KernelCallChecker {
 public:
  KernelCallChecker(const Flatbuffer& fb, const char* method, Reason& why)
      : fb_(fb), method_(method), why_(why) {}

  bool run() {
    size_t plan = 0, chains = 0;
    uint32_t n_chains = 0;
    if (!find_plan(fb_, method_, plan)) return unreadable();
    if (plan == 0) return true;  // no such method: Program::method_meta reports it
    if (!read_values(fb_, plan, values_)) return unreadable();
    if (!fb_.ref_field(plan, kPlanChains, chains) || !fb_.ref_field(plan, kPlanOperators, ops_) ||
        (chains != 0 && !fb_.vector(chains, 4, n_chains)) ||
        (ops_ != 0 && !fb_.vector(ops_, 4, n_ops_))) {
      return unreadable();
    }
    for (uint32_t c = 0; c < n_chains; ++c) {
      if (!chain(chains, c)) return false;
    }
    return true;
  }

 private:
  bool unreadable() {
    return why_.reject("payload.unreadable",
                       format("reference payload: the flatbuffer of method '%s' is unreadable "
                              "(an offset leaves the payload)",
                              method_));
  }

  bool chain(size_t chains, uint32_t c) {
    size_t chain = 0, instrs = 0;
    uint32_t n_instrs = 0;
    if (!fb_.deref(chains + 4 + 4 * size_t(c), chain) ||
        !fb_.ref_field(chain, kChainInstructions, instrs) ||
        (instrs != 0 && !fb_.vector(instrs, 4, n_instrs))) {
      return unreadable();
    }
    for (uint32_t k = 0; k < n_instrs; ++k) {
      if (!instruction(instrs, c, k)) return false;
    }
    return true;
  }

  bool instruction(size_t instrs, uint32_t c, uint32_t k) {
    size_t instr = 0, type_at = 0, args = 0, index_at = 0;
    uint8_t type = 0;
    uint32_t raw_index = 0;
    if (!fb_.deref(instrs + 4 + 4 * size_t(k), instr) || !fb_.field(instr, kInstrType, type_at) ||
        (type_at != 0 && !fb_.u8(type_at, type))) {
      return unreadable();
    }
    if (type != kKernelCallType) {
      static const char* const kNames[] = {"an empty", "a kernel", "a delegate",
                                           "a move",   "a jump",   "a free"};
      return why_.reject(
          "payload.instruction",
          format("reference payload: method '%s' instruction %u:%u is %s call; the reference "
                 "engine runs straight-line kernel calls only (a free, move, jump or nested "
                 "delegate call could leave a tensor it later uses without data)",
                 method_, c, k, type < 6 ? kNames[type] : "an unknown"));
    }
    if (!fb_.ref_field(instr, kInstrArgs, args) || args == 0 ||
        !fb_.field(args, kKernelOpIndex, index_at) ||
        (index_at != 0 && !fb_.u32(index_at, raw_index))) {
      return unreadable();
    }
    std::string op_name;
    return named_operator(static_cast<int32_t>(raw_index), c, k, op_name) &&
           arguments_have_data(args, op_name, c, k);
  }

  bool named_operator(int32_t index, uint32_t c, uint32_t k, std::string& op_name) {
    std::string what;
    if (index < 0 || static_cast<uint32_t>(index) >= n_ops_) {
      return why_.reject("payload.operator_index",
                         format("reference payload: method '%s' instruction %u:%u calls operator "
                                "%d, but the method has %u operators",
                                method_, c, k, index, n_ops_));
    }
    if (!operator_named(fb_, ops_, static_cast<uint32_t>(index), what, op_name)) {
      return why_.reject("payload.operator_name",
                         format("reference payload: method '%s' instruction %u:%u calls operator "
                                "%d, which %s",
                                method_, c, k, index, what.c_str()));
    }
    return true;
  }

  // A view's output gets its input's data when the view runs; every other argument must have
  // data by the time its instruction runs (ExecuTorch leaves it null otherwise).
  bool arguments_have_data(size_t args, const std::string& op_name, uint32_t c, uint32_t k) {
    std::vector<int32_t> arg_list;
    if (!int_vector(fb_, args, kKernelArgs, arg_list)) return unreadable();
    const bool view = op_name == kViewOperator && !arg_list.empty();
    for (size_t i = 0; i + (view ? 1 : 0) < arg_list.size(); ++i) {
      const int64_t v = dataless_arg(values_, arg_list[i]);
      if (v >= 0) {
        return why_.reject("payload.dataless_tensor",
                           format("reference payload: method '%s' instruction %u:%u (%s) passes "
                                  "tensor value %lld, which has no data (no storage, not a "
                                  "method input or output, not a view of data)",
                                  method_, c, k, op_name.c_str(), static_cast<long long>(v)));
      }
    }
    if (view) {
      const int32_t out = arg_list.back();
      if (out >= 0 && static_cast<size_t>(out) < values_.data.size()) values_.data[out] = 1;
    }
    return true;
  }

  const Flatbuffer& fb_;
  const char* method_;
  Reason& why_;
  Values values_;
  size_t ops_ = 0;
  uint32_t n_ops_ = 0;
};

}  // namespace

bool check_kernel_calls(const void* data, size_t size, const char* method, Reason& why) {
  const Flatbuffer fb(data, size);
  return KernelCallChecker(fb, method, why).run();
}

}  // namespace tte
