// The application-facing device API of tte/device.h, over device.h.
#include <tte/device.h>

#include "device.h"
#include "device_loader.h"

namespace tte {
using executorch::runtime::DataLoader;
using executorch::runtime::FreeableBuffer;

Result<FreeableBuffer> DeviceAwareLoader::load(size_t offset, size_t size,
                                               const SegmentInfo& info) const {
  if (info.segment_type == SegmentInfo::Type::Constant) {
    return constants_.load(*inner_, offset, size, info);
  }
  return inner_->load(offset, size, info);
}

Error DeviceAwareLoader::copy_in(size_t offset, size_t size, const SegmentInfo& info,
                                 void* buffer) const {
  Device* d = active_device();
  if (d == nullptr || !d->owns(buffer)) return inner_->load_into(offset, size, info, buffer);
  auto data = inner_->load(offset, size, info);
  if (!data.ok()) return data.error();
  const Error e = d->to_device(buffer, data->data(), size);
  data->Free();
  return e;
}

Error DeviceAwareLoader::load_into(size_t offset, size_t size, const SegmentInfo& info,
                                   void* buffer) const {
  const Error e = copy_in(offset, size, info, buffer);
  if (e == Error::Ok && info.segment_type == SegmentInfo::Type::Mutable) {
    try {
      initial_values_.push_back(Load{offset, size, info, buffer});
    } catch (...) {
      return Error::MemoryAllocationFailed;
    }
  }
  return e;
}

Error DeviceAwareLoader::restore_initial_values() const {
  for (const Load& l : initial_values_) {
    const Error e = copy_in(l.offset, l.size, l.info, l.buffer);
    if (e != Error::Ok) return e;
  }
  return Error::Ok;
}

int use_device(const char* kind, std::string& why) noexcept {
  try {
    const std::string k = kind ? kind : "";
    Device* d = nullptr;
    if (k == "none") {
      if (active_device() == nullptr) return 0;
      why = std::string("device ") + active_device()->name() + " is already in force";
      return static_cast<int>(Error::InvalidState);
    } else if (k == "emulated") {
      d = &emulated_device();
    } else if (k == "cuda" || k == "auto") {
      d = cuda_device();
      if (d == nullptr && k == "auto") return 0;
      if (d == nullptr) {
        why = "no CUDA device: this runtime was built without CUDA, or no GPU is visible";
        return static_cast<int>(Error::NotSupported);
      }
    } else {
      why = "unknown device kind '" + k + "' (cuda, emulated, auto or none)";
      return static_cast<int>(Error::InvalidArgument);
    }
    const Error e = activate(*d);
    if (e != Error::Ok) {
      why = std::string("device ") + active_device()->name() + " is already in force; a process " +
            "has one device";
    }
    return static_cast<int>(e);
  } catch (...) {
    why.clear();
    return static_cast<int>(Error::MemoryAllocationFailed);
  }
}

int use_stream(void* stream, std::string& why) noexcept {
  Device* d = active_device();
  if (d == nullptr) {
    try {
      why = "no device is in force: choose one with use_device before a stream";
    } catch (...) {
    }
    return static_cast<int>(Error::InvalidState);
  }
  return static_cast<int>(d->set_stream(stream));
}

void* new_stream(std::string& why) noexcept {
  Device* d = active_device();
  auto s = d != nullptr ? d->create_stream() : Result<void*>(Error::InvalidState);
  if (s.ok()) return s.get();
  try {
    why = d == nullptr ? "no device is in force: choose one with use_device before a stream"
                       : std::string("device ") + d->name() + " has no streams";
  } catch (...) {
  }
  return nullptr;
}

const char* device_name() noexcept {
  Device* d = active_device();
  return d ? d->name() : "";
}

std::unique_ptr<DataLoader> device_aware(std::unique_ptr<DataLoader> inner) {
  return std::make_unique<DeviceAwareLoader>(std::move(inner));
}

}  // namespace tte
