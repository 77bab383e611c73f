// The kernel tte::kv_cache_update.out (CONTRACTS.md §3): registered, in place writes only the
// indexed rows (other pages are read-only), out of place copies cache once, generic over element
// sizes/ranks/dims, and refuses bad input without writing.
#include "check.h"
#include "pages.h"

#include <tte/kv_cache_update.h>

#include <executorch/extension/tensor/tensor_ptr.h>
#include <executorch/runtime/kernel/operator_registry.h>

#include <cstring>
#include <numeric>
#include <vector>

using executorch::aten::ScalarType;
using executorch::extension::make_tensor_ptr;
using executorch::runtime::Error;
using executorch::runtime::KernelRuntimeContext;

namespace {

template <class T>
std::vector<T> iota(size_t n, T start) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(start + static_cast<T>(i));
  return v;
}

// Expected index_copy result on a [outer, S, row] view, computed independently of the kernel.
template <class T>
std::vector<T> index_copy(std::vector<T> cache, size_t outer, size_t S, size_t row,
                          const std::vector<int64_t>& idx, const std::vector<T>& upd) {
  for (size_t o = 0; o < outer; ++o)
    for (size_t i = 0; i < idx.size(); ++i)
      for (size_t r = 0; r < row; ++r)
        cache[(o * S + idx[i]) * row + r] = upd[(o * idx.size() + i) * row + r];
  return cache;
}

}  // namespace

TEST(kernel_is_in_executorchs_registry) {
  CHECK(executorch::runtime::registry_has_op_function("tte::kv_cache_update.out"));
}

TEST(in_place_writes_only_the_indexed_rows) {
  // cache [1, 2, 4, 1024] float32: every (head, position) row is exactly one 4 KiB page.
  REQUIRE(tte_test::Pages::page() == 4096);
  tte_test::Pages mem(8);
  auto* c = reinterpret_cast<float*>(mem.data());
  for (size_t i = 0; i < 8 * 1024; ++i) c[i] = static_cast<float>(i);
  std::vector<float> before(c, c + 8 * 1024);
  auto cache = make_tensor_ptr({1, 2, 4, 1024}, c, ScalarType::Float);
  auto upd_data = iota<float>(2 * 1024, -5000.f);
  auto update = make_tensor_ptr({1, 2, 1, 1024}, upd_data.data(), ScalarType::Float);
  std::vector<int64_t> idx = {2};
  auto index = make_tensor_ptr({1}, idx.data(), ScalarType::Long);
  mem.protect_all_but({2, 6});  // head 0 position 2, head 1 position 2
  KernelRuntimeContext ctx;
  auto& r = tte::kv_cache_update_out(ctx, *cache, 2, *index, *update, *cache);
  mem.unprotect();
  CHECK(ctx.failure_state() == Error::Ok);
  CHECK(r.const_data_ptr() == c);
  auto want = index_copy(before, 2, 4, 1024, idx, upd_data);
  CHECK(std::memcmp(c, want.data(), want.size() * sizeof(float)) == 0);
  CHECK_EQ(c[2 * 1024], -5000.f);
  CHECK_EQ(c[6 * 1024 + 1023], -5000.f + 2047);
  CHECK_EQ(c[3 * 1024], before[3 * 1024]);
}

TEST(out_of_place_copies_cache_then_writes_rows) {
  auto cdata = iota<float>(1 * 2 * 8 * 4, 0.f);
  auto odata = std::vector<float>(cdata.size(), -1.f);
  auto udata = iota<float>(1 * 2 * 2 * 4, 100.f);
  std::vector<int64_t> idx = {5, 0};
  auto cache = make_tensor_ptr({1, 2, 8, 4}, cdata.data(), ScalarType::Float);
  auto out = make_tensor_ptr({1, 2, 8, 4}, odata.data(), ScalarType::Float);
  auto update = make_tensor_ptr({1, 2, 2, 4}, udata.data(), ScalarType::Float);
  auto index = make_tensor_ptr({2}, idx.data(), ScalarType::Long);
  KernelRuntimeContext ctx;
  tte::kv_cache_update_out(ctx, *cache, 2, *index, *update, *out);
  CHECK(ctx.failure_state() == Error::Ok);
  CHECK(odata == index_copy(cdata, 2, 8, 4, idx, udata));
  CHECK(cdata == iota<float>(cdata.size(), 0.f));  // the input cache is untouched
}

TEST(generic_over_element_size_rank_and_dim) {
  {  // int64, rank 3, dim 1, negative dim spelling
    auto c = iota<int64_t>(2 * 5 * 3, 0);
    auto u = iota<int64_t>(2 * 2 * 3, 1000);
    std::vector<int64_t> idx = {4, 1};
    auto want = index_copy(c, 2, 5, 3, idx, u);
    auto cache = make_tensor_ptr({2, 5, 3}, c.data(), ScalarType::Long);
    auto update = make_tensor_ptr({2, 2, 3}, u.data(), ScalarType::Long);
    auto index = make_tensor_ptr({2}, idx.data(), ScalarType::Long);
    KernelRuntimeContext ctx;
    tte::kv_cache_update_out(ctx, *cache, -2, *index, *update, *cache);
    CHECK(ctx.failure_state() == Error::Ok);
    CHECK(c == want);
  }
  // 2-byte (float16/bfloat16 bit patterns) and 1-byte elements, rank 1 and rank 2 at dim 0.
  for (ScalarType t : {ScalarType::Half, ScalarType::BFloat16}) {
    auto c = iota<uint16_t>(6 * 2, 1);
    auto u = iota<uint16_t>(1 * 2, 0x7000);
    std::vector<int64_t> idx = {5};
    auto want = index_copy(c, 1, 6, 2, idx, u);
    auto cache = make_tensor_ptr({6, 2}, c.data(), t);
    auto update = make_tensor_ptr({1, 2}, u.data(), t);
    auto index = make_tensor_ptr({1}, idx.data(), ScalarType::Long);
    KernelRuntimeContext ctx;
    tte::kv_cache_update_out(ctx, *cache, 0, *index, *update, *cache);
    CHECK(ctx.failure_state() == Error::Ok);
    CHECK(c == want);
  }
  {
    std::vector<int8_t> c = {1, 2, 3, 4};
    std::vector<int8_t> u = {-9};
    std::vector<int64_t> idx = {3};
    auto cache = make_tensor_ptr({4}, c.data(), ScalarType::Char);
    auto update = make_tensor_ptr({1}, u.data(), ScalarType::Char);
    auto index = make_tensor_ptr({1}, idx.data(), ScalarType::Long);
    KernelRuntimeContext ctx;
    tte::kv_cache_update_out(ctx, *cache, 0, *index, *update, *cache);
    CHECK(ctx.failure_state() == Error::Ok);
    CHECK(c == (std::vector<int8_t>{1, 2, 3, -9}));
  }
}

TEST(out_of_bounds_index_fails_without_writing) {
  auto c = iota<float>(1 * 2 * 8 * 4, 0.f);
  auto u = iota<float>(1 * 2 * 1 * 4, 100.f);
  auto cache = make_tensor_ptr({1, 2, 8, 4}, c.data(), ScalarType::Float);
  auto update = make_tensor_ptr({1, 2, 1, 4}, u.data(), ScalarType::Float);
  for (int64_t bad : {int64_t(8), int64_t(-1)}) {
    tte_test::clear_logs();
    std::vector<int64_t> idx = {bad};
    auto index = make_tensor_ptr({1}, idx.data(), ScalarType::Long);
    KernelRuntimeContext ctx;
    tte::kv_cache_update_out(ctx, *cache, 2, *index, *update, *cache);
    CHECK(ctx.failure_state() == Error::InvalidArgument);
    CHECK(tte_test::logged("tte::kv_cache_update.out: index[0] = " + std::to_string(bad) +
                           " is outside [0, 8) along dim 2"));
    CHECK(c == iota<float>(c.size(), 0.f));
  }
}

TEST(shape_and_index_errors_are_named) {
  auto c = iota<float>(1 * 2 * 8 * 4, 0.f);
  auto u = iota<float>(1 * 3 * 1 * 4, 0.f);
  std::vector<int64_t> idx = {1};
  auto cache = make_tensor_ptr({1, 2, 8, 4}, c.data(), ScalarType::Float);
  auto update = make_tensor_ptr({1, 3, 1, 4}, u.data(), ScalarType::Float);
  auto index = make_tensor_ptr({1}, idx.data(), ScalarType::Long);
  KernelRuntimeContext ctx;
  tte::kv_cache_update_out(ctx, *cache, 2, *index, *update, *cache);
  CHECK(ctx.failure_state() == Error::InvalidArgument);
  CHECK(
      tte_test::logged("update size 3 at dim 1 differs from cache size 2 (only dim 2 may "
                       "differ)"));
  tte_test::clear_logs();
  std::vector<int64_t> two = {1, 2};
  auto index2 = make_tensor_ptr({2}, two.data(), ScalarType::Long);
  auto u1 = make_tensor_ptr({1, 2, 1, 4}, u.data(), ScalarType::Float);
  KernelRuntimeContext ctx2;
  tte::kv_cache_update_out(ctx2, *cache, 2, *index2, *u1, *cache);
  CHECK(ctx2.failure_state() == Error::InvalidArgument);
  CHECK(tte_test::logged("index has 2 entries, update has 1 positions along dim 2"));
  tte_test::clear_logs();
  KernelRuntimeContext ctx3;
  tte::kv_cache_update_out(ctx3, *cache, 4, *index, *u1, *cache);
  CHECK(ctx3.failure_state() == Error::InvalidArgument);
  CHECK(tte_test::logged("dim 4 is out of range for a rank-4 cache"));
}

TEST_MAIN()
