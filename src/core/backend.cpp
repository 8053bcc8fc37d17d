#include "tessera/core/backend.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tessera {

Workspace::~Workspace() {
  for (auto& [slot, block] : blocks_) backend_.deallocate(block.ptr);
}

void* Workspace::get(std::string_view slot, size_t bytes) {
  auto it = blocks_.find(slot);
  if (it == blocks_.end()) it = blocks_.emplace(std::string(slot), Block{}).first;
  Block& b = it->second;
  if (bytes > b.bytes) {
    // Grow by at least half again, so a slowly rising size (NeRF's sample count) does not
    // reallocate every call.
    const size_t grown = std::max(bytes, b.bytes + b.bytes / 2);
    backend_.deallocate(b.ptr);
    b = {};
    b.ptr = backend_.allocate(grown);
    b.bytes = grown;
  }
  return b.ptr;
}

size_t Workspace::bytes_held() const {
  size_t n = 0;
  for (const auto& [slot, block] : blocks_) n += block.bytes;
  return n;
}

void Stream::synchronize() { backend_->synchronize(*this); }

namespace {
// Backends whose copies to the host are done on return: the copy happens when it is queued.
class CopyingReadback final : public Backend::Readback {
 public:
  CopyingReadback(Backend& backend, size_t capacity) : backend_(backend), bytes_(capacity) {}
  void enqueue(Stream& stream, const void* src, size_t bytes) override {
    TESSERA_CHECK(bytes <= bytes_.size(), "readback of {} bytes into {}", bytes, bytes_.size());
    backend_.synchronize(stream);
    backend_.copy_to_host(bytes_.data(), src, bytes);
  }
  const void* wait() override { return bytes_.data(); }

 private:
  Backend& backend_;
  std::vector<unsigned char> bytes_;
};
}  // namespace

std::unique_ptr<Backend::Readback> Backend::create_readback(size_t capacity) {
  return std::make_unique<CopyingReadback>(*this, capacity);
}

std::unique_ptr<Stream> Backend::wrap_stream(void* native) {
  TESSERA_CHECK(native == nullptr, "the {} backend has no native streams to wrap; pass null for its default stream",
                name());
  return std::make_unique<Stream>(*this, default_stream().native());  // shares the default queue
}

std::vector<std::string> Backend::op_names() const {
  std::vector<std::string> names;
  for (const auto& [type, entry] : ops_) names.emplace_back(entry.name);
  std::sort(names.begin(), names.end());
  return names;
}

std::string Backend::op_list() const { return fmt::format("{}", fmt::join(op_names(), ", ")); }

void Backend::check_allocation(size_t bytes) const {
  TESSERA_CHECK(bytes <= allocation_limit_, "{}: allocating {} bytes is over this backend's limit of {} bytes", name(),
                bytes, allocation_limit_);
}

}  // namespace tessera
