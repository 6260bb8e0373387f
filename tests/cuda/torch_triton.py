"""torch_triton.py <ref|opt|wrong|last>: a PyTorch program with its own
Triton kernel, `scale_add_kernel`: out = 2 * x + y over n = 2^20 float32
values (x, y from a seeded generator). `opt` computes the same with another
block size; `wrong` forgets y; `last` forgets y in the last element only.
Prints the checksum of out. ditto captures `scale_add_kernel` (a Triton
kernel has no C++ signature: its argument types come from Triton's cache)
and compares the runs."""

import sys

import torch
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, WITH_Y: tl.constexpr,
                     LAST_WRONG: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    out = 2.0 * x + y if WITH_Y else 2.0 * x
    if LAST_WRONG:
        out = tl.where(offsets == n - 1, 2.0 * x, out)
    tl.store(out_ptr + offsets, out, mask=mask)


def main() -> int:
    variant = sys.argv[1] if len(sys.argv) > 1 else "ref"
    if variant not in ("ref", "opt", "wrong", "last"):
        print(f"usage: {sys.argv[0]} <ref|opt|wrong|last>", file=sys.stderr)
        return 2
    n = 1 << 20
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(n, device="cuda", generator=gen)
    y = torch.randn(n, device="cuda", generator=gen)
    out = torch.empty_like(x)
    block = 2048 if variant == "opt" else 1024
    grid = (triton.cdiv(n, block),)
    scale_add_kernel[grid](x, y, out, n, BLOCK=block, WITH_Y=variant != "wrong",
                           LAST_WRONG=variant == "last")
    torch.cuda.synchronize()
    print(f"torch_triton {variant}: checksum {out.double().sum().item():.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
