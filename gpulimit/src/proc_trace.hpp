// GPU_LIMIT_TRACE_PROC_ADDRESS: a record of what libgpulimit made of each
// cuGetProcAddress answer, for checking a real driver (the acceptance run):
// one line per distinct (symbol, cudaVersion, flags) per process,
//
//   gpulimit: pid 4711 cuGetProcAddress_v2(cuMemAlloc, 12080, 1): export cuMemAlloc_v2, hooked
//
// The value is an absolute path (lines are appended; the file is created
// 0600) or "stderr". Unset or empty: off, and then costs one relaxed load
// per cuGetProcAddress. Read with secure_getenv: a set-user-ID program
// (ld.so.preload) never writes where its caller says.
#pragma once

#include "cuda_abi.hpp"

#include <atomic>
#include <cstddef>

namespace gpulimit {

// A diagnostic trace file named by an environment variable (an absolute
// path, appended to, created 0600; or "stderr"), read with secure_getenv on
// first use and cached in `cache`: its fd, or kTraceOff. Used by this trace
// and the compute driver's (GPU_LIMIT_TRACE_COMPUTE).
inline constexpr int kTraceUnread = -2;
inline constexpr int kTraceOff = -1;
int trace_file(std::atomic<int>& cache, const char* variable);
// Writes line[0, length) and a newline in one write (truncated to size - 2).
void write_trace_line(int fd, char* line, int length, size_t size);

inline constexpr const char* kProcTraceVariable = "GPU_LIMIT_TRACE_PROC_ADDRESS";

bool proc_trace_enabled();

// Writes "gpulimit: pid P API(SYMBOL, VERSION, FLAGS): OUTCOME" once per
// (symbol, version, flags); `outcome` is a printf format.
void proc_trace(const char* api, const char* symbol, int cudaVersion, cuuint64_t flags,
                const char* outcome, ...) __attribute__((format(printf, 5, 6)));

} // namespace gpulimit
