#include "tessera/core/device_timer.h"

#include "tessera/core/backend.h"

namespace tessera {

struct DeviceTimer::Impl {
  Backend* backend = nullptr;
  std::unique_ptr<Backend::Event> start, stop;
};

DeviceTimer::DeviceTimer(Device kind) : impl_(std::make_unique<Impl>()) {
  impl_->backend = &backend_for(kind);
  impl_->start = impl_->backend->create_event();
  impl_->stop = impl_->backend->create_event();
}

DeviceTimer::~DeviceTimer() = default;

void DeviceTimer::start() { impl_->start->record(impl_->backend->default_stream()); }
void DeviceTimer::stop() { impl_->stop->record(impl_->backend->default_stream()); }
float DeviceTimer::milliseconds() { return impl_->stop->elapsed_since(*impl_->start); }

size_t device_memory_used(Device kind) { return backend_for(kind).memory_used(); }

}  // namespace tessera
