# What a CUDA client under MPS sees: torch's SM count and the driver's, with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
import ctypes
import os

import torch

p = torch.cuda.get_device_properties(0)
cu = ctypes.CDLL("libcuda.so.1")
cu.cuInit(0)
v = ctypes.c_int()
cu.cuDeviceGetAttribute(ctypes.byref(v), 16, 0)  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
print("pct", os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "torch sm", p.multi_processor_count,
      "driver sm", v.value)
x = torch.ones(4, device="cuda")
torch.cuda.synchronize()
print("kernel ok", float(x.sum()))
