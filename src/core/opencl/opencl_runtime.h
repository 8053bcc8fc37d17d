#pragma once
// The OpenCL backend's pieces that its op table needs (not public API): the device's
// context and queue, the mapping from a buffer handle (a virtual address this backend hands
// out; never dereferenced) back to its (cl_mem, byte offset), and programs built at run time
// from embedded .cl sources with -D specializations, kept per device in memory and on disk.
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "tessera/core/backend.h"
#include "core/program_cache.h"

namespace tessera::detail {

// Throws tessera::Error naming the call and OpenCL's error code.
void check_cl(cl_int status, const char* what);

struct ClAddress {
  cl_mem mem;
  size_t offset;  // bytes
  size_t buffer_bytes;
};


// The OpenCL backend of one device: Backend's interface plus what the ops use.
class OpenClRuntime {
 public:
  virtual ~OpenClRuntime() = default;
  virtual cl_context context() const = 0;
  virtual cl_device_id device() const = 0;
  virtual cl_command_queue queue(Stream& stream) const = 0;
  // The buffer and byte offset of a handle + byte offset (a view's address()).
  virtual ClAddress resolve(const void* address) const = 0;
  // The kernel `name` of the program built from `source` (an embedded .cl file, named
  // `source_name` in errors) with `options` (-D defines); built once per (source, options).
  // A build failure is an error carrying the build log.
  virtual cl_kernel kernel(const std::string& source_name, const char* source, const std::string& options,
                           const char* name) = 0;
  virtual bool has_fp16() const = 0;
  // Compiled programs on disk (ProgramCache::default_folder()), and how many programs this
  // process took from it rather than compiling.
  virtual const ProgramCache& program_cache() const = 0;
  virtual int programs_from_cache() const = 0;
  virtual size_t max_work_group_size() const = 0;
};

OpenClRuntime& opencl_runtime(Backend& backend);

}  // namespace tessera::detail
