"""Extract the two CUDA headers a TORCH_CUDA=1 build needs from wheels.

    python scripts/cuda_headers.py WHEEL_DIR INCLUDE_DIR

The torch==2.1.0 wheel's nvidia/ packages hold CUDA 12.1's runtime, cuBLAS,
NCCL … headers but not crt/host_defines.h (with crt/host_config.h, included
by cuda_runtime_api.h) nor <nv/target> (with nv/detail/*, included by
cuda_fp16.hpp). The Makefile downloads nvidia-cuda-nvcc-cu12 (crt/) and
nvidia-cuda-cccl-cu12 (nv/) at the versions pinned in scripts/constraints.txt
into WHEEL_DIR; this copies only those two directories into INCLUDE_DIR,
which becomes CUDA_HOME/include for scripts/gotch-overlay.sh. Nothing else
of the wheels (nvcc's ptxas and libnvvm, CCCL's cub/thrust/libcu++ of a newer
CUDA) reaches the include path.
"""

import glob
import os
import sys
import zipfile

KEEP = ("nvidia/cuda_nvcc/include/crt/", "nvidia/cuda_cccl/include/nv/")
NEED = ("crt/host_defines.h", "crt/host_config.h", "nv/target", "nv/detail/__target_macros", "nv/detail/__preprocessor")


def main() -> int:
    wheels, out = sys.argv[1], sys.argv[2]
    paths = sorted(glob.glob(os.path.join(wheels, "*.whl")))
    if not paths:
        print(f"cuda_headers: no wheel in {wheels}", file=sys.stderr)
        return 1
    tmp = out + ".tmp"
    for path in paths:
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if not name.startswith(KEEP) or name.endswith("/"):
                    continue
                dst = os.path.join(tmp, name.split("/include/", 1)[1])
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                with open(dst, "wb") as f:
                    f.write(z.read(name))
    missing = [h for h in NEED if not os.path.isfile(os.path.join(tmp, h))]
    if missing:
        print(f"cuda_headers: {', '.join(missing)} not in {', '.join(paths)}", file=sys.stderr)
        return 1
    os.rename(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
