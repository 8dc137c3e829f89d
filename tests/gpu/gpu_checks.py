#!/usr/bin/env python3
"""Helpers of tests/gpu/acceptance that need PyTorch or NVML (ctypes).

Each subcommand prints one JSON object on its last line of stdout.

  context                  seconds to the first CUDA context (torch.zeros(1))
  mem                      mem_get_info, a 3 GiB tensor (must raise
                           torch.OutOfMemoryError under a 2 GiB cap), 1.5 GiB
  hold MIB                 allocate MIB and hold (prints a "ready" line first)
  matmul SECONDS           a matmul loop; iterations per second
  share PID START STOP     NVML's view of the GPU over [START, STOP] seconds
                           from now: the device's busy share and PID's
  apps                     NVML's compute processes: pid -> used MiB
  poll SECONDS [MS]        what a poller of NVML's utilization sees, every MS
                           (default 50) milliseconds, as libgpulimit's compute
                           driver polls it: each call's new per-process
                           samples and the device's own samples
"""
import ctypes
import json
import os
import sys
import time


def emit(result):
    print(json.dumps(result), flush=True)


def cmd_context():
    import torch
    start = time.monotonic()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    emit({"context_s": round(time.monotonic() - start, 4)})


def cmd_mem():
    import torch
    out = {}
    free, total = torch.cuda.mem_get_info()
    out["free_mib"] = free >> 20
    out["total_mib"] = total >> 20
    oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    try:
        big = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
        out["alloc_3g"] = "ok"
        del big
    except oom:
        out["alloc_3g"] = "OutOfMemoryError"
    except RuntimeError as e:  # another error is a failure, say which
        out["alloc_3g"] = "RuntimeError: " + str(e).splitlines()[0][:120]
    torch.cuda.empty_cache()
    try:
        small = torch.empty(3 << 29, dtype=torch.uint8, device="cuda")
        small.fill_(1)
        torch.cuda.synchronize()
        out["alloc_1_5g"] = "ok"
        del small
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        out["alloc_1_5g"] = type(e).__name__ + ": " + str(e).splitlines()[0][:120]
    emit(out)


def cmd_hold(mib):
    import torch
    held = torch.empty(int(mib) << 20, dtype=torch.uint8, device="cuda")
    held.fill_(1)
    torch.cuda.synchronize()
    print("ready pid=%d" % os.getpid(), flush=True)
    time.sleep(3600)


def cmd_matmul(seconds):
    import torch
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    start = time.monotonic()
    iterations = 0
    while time.monotonic() - start < float(seconds):
        for _ in range(4):
            a @ b
        torch.cuda.synchronize()
        iterations += 4
    emit({"iterations_per_s": round(iterations / (time.monotonic() - start), 1)})


class ProcessUtilization(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong),
                ("smUtil", ctypes.c_uint), ("memUtil", ctypes.c_uint),
                ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class Sample(ctypes.Structure):
    _fields_ = [("timeStamp", ctypes.c_ulonglong), ("value", ctypes.c_ulonglong)]


def nvml_device():
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    if nvml.nvmlInit_v2() != 0:
        raise SystemExit("nvmlInit failed")
    device = ctypes.c_void_p()
    index = int(os.environ.get("GPU_PROBE_DEVICE", "0"))
    if nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(device)) != 0:
        raise SystemExit("no NVML device %d" % index)
    return nvml, device


def cmd_share(pid, start_s, stop_s):
    """Busy share in (now+START, now+STOP], from the device's utilization
    samples (one per window, idle ones too) and from PID's own samples (a
    process has one only for the windows it was busy in)."""
    pid = int(pid)
    nvml, device = nvml_device()
    wall0 = time.time()
    time.sleep(float(stop_s))
    first_us = int((wall0 + float(start_s)) * 1e6)
    last_us = int((wall0 + float(stop_s)) * 1e6)
    samples = (Sample * 512)()
    count = ctypes.c_uint(512)
    value_type = ctypes.c_int()
    code = nvml.nvmlDeviceGetSamples(device, 1, ctypes.c_ulonglong(first_us), ctypes.byref(value_type),
                                     ctypes.byref(count), samples)
    device_values = [samples[i].value & 0xFFFFFFFF for i in range(count.value)
                     if first_us < samples[i].timeStamp <= last_us] if code == 0 else []
    stamps = sorted(samples[i].timeStamp for i in range(count.value)) if code == 0 else []
    window_us = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else 0
    rows = (ProcessUtilization * 4096)()
    rcount = ctypes.c_uint(4096)
    rcode = nvml.nvmlDeviceGetProcessUtilization(device, rows, ctypes.byref(rcount),
                                                 ctypes.c_ulonglong(first_us))
    mine = [rows[i].smUtil for i in range(rcount.value)
            if rcode == 0 and rows[i].pid == pid and rows[i].timeStamp <= last_us]
    windows = (last_us - first_us) / window_us if window_us else 0
    emit({
        "device_share": round(sum(device_values) / len(device_values) / 100, 4) if device_values else None,
        "device_samples": len(device_values),
        "window_ms": round(window_us / 1000, 1),
        "process_share": round(sum(mine) / windows / 100, 4) if windows else None,
        "process_samples": len(mine),
        "nvml_codes": [code, rcode],
    })


def cmd_apps():
    """pid -> used MiB, through the versioned process list (nvml.h's
    nvmlProcessDetail_v1_t), independent of the code under test."""
    nvml, device = nvml_device()

    class Detail(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong), ("gi", ctypes.c_uint),
                    ("ci", ctypes.c_uint), ("protected", ctypes.c_ulonglong)]

    class DetailList(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint), ("mode", ctypes.c_uint), ("count", ctypes.c_uint),
                    ("entries", ctypes.POINTER(Detail))]

    entries = (Detail * 256)()
    request = DetailList(ctypes.sizeof(DetailList) | (1 << 24), 0, 256,
                         ctypes.cast(entries, ctypes.POINTER(Detail)))
    code = nvml.nvmlDeviceGetRunningProcessDetailList(device, ctypes.byref(request))
    emit({"code": code, "apps": {str(entries[i].pid): entries[i].used >> 20
                                 for i in range(request.count if code == 0 else 0)}})


def cmd_poll(seconds, period_ms="50"):
    nvml, device = nvml_device()
    rows = (ProcessUtilization * 4096)()
    samples = (Sample * 512)()
    start = time.time()
    process_seen = int(start * 1e6)
    device_seen = process_seen
    polls = []
    while time.time() - start < float(seconds):
        t = round(time.time() - start, 3)
        count = ctypes.c_uint(4096)
        code = nvml.nvmlDeviceGetProcessUtilization(device, rows, ctypes.byref(count),
                                                    ctypes.c_ulonglong(process_seen))
        got = []
        if code == 0:
            for i in range(count.value):
                got.append([rows[i].pid, round((rows[i].timeStamp - start * 1e6) / 1000, 1), rows[i].smUtil])
                process_seen = max(process_seen, rows[i].timeStamp)
        dcount = ctypes.c_uint(512)
        value_type = ctypes.c_int()
        dcode = nvml.nvmlDeviceGetSamples(device, 1, ctypes.c_ulonglong(device_seen),
                                          ctypes.byref(value_type), ctypes.byref(dcount), samples)
        dev = []
        if dcode == 0:
            for i in range(dcount.value):
                dev.append([round((samples[i].timeStamp - start * 1e6) / 1000, 1), samples[i].value & 0xFFFFFFFF])
                device_seen = max(device_seen, samples[i].timeStamp)
        if got or dev:
            polls.append({"t": t, "code": code, "process": got, "device": dev})
        time.sleep(float(period_ms) / 1000)
    emit({"polls": polls})


def main(argv):
    commands = {"context": cmd_context, "mem": cmd_mem, "hold": cmd_hold, "matmul": cmd_matmul,
                "share": cmd_share, "apps": cmd_apps, "poll": cmd_poll}
    if len(argv) < 2 or argv[1] not in commands:
        sys.exit(__doc__)
    commands[argv[1]](*argv[2:])


if __name__ == "__main__":
    main(sys.argv)
