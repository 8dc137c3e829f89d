// What happens after a refused allocation: the OOM script
// (ALIYUN_COM_GPU_OOM_SCRIPT, once per episode, bounded in time) and the
// kill policy (GPU_LIMIT_OOM_POLICY=kill: eGPU's strict form).
#pragma once

#include <cstdint>

namespace gpulimit {

struct Runtime;
struct DeviceInfo;

// Called after the refusal was noted. An episode starts with the first
// refusal and ends when an allocation of this process is admitted again;
// the script runs once per episode. Under the kill policy this does not
// return: the script runs, one line goes to stderr, SIGKILL ends the process.
void handle_refusal(Runtime& runtime, const DeviceInfo& device, uint64_t request);

// Runs `script` with the environment plus the GPU_LIMIT_OOM_* variables and
// waits for it at most timeout_ms, then kills its process group and reaps
// it. Copes with SIGCHLD set to SIG_IGN (the child reaps itself) and with a
// program that reaps every child (ECHILD ends the wait too).
void run_oom_script(const char* script, uint32_t timeout_ms, const char* device_uuid,
                    uint64_t request, uint64_t usage, uint64_t cap);

} // namespace gpulimit
