"""compile_to_cache.py CACHE TARGET KERNEL: compiles one of ditto's test
kernels with the installed Triton for TARGET (`cuda`: sm_90, `hip`:
gfx942), without a GPU, into the Triton cache at CACHE, as a program's
launch would: the metadata, the Triton IR and the binary in one
directory per variant. The tests read these real entries.

Kernels (the names the test programs launch):
  scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK)  out = 2 * x + y
  offset_by(out_ptr, offset, n, BLOCK)               out += offset
Prints the entry's directory."""

import os
import sys


def main() -> int:
    if len(sys.argv) != 4 or sys.argv[2] not in ("cuda", "hip"):
        print(__doc__, file=sys.stderr)
        return 2
    cache, target, kernel = sys.argv[1:]
    os.environ["TRITON_CACHE_DIR"] = cache
    try:
        import triton
        import triton.language as tl
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as e:
        print(f"compile_to_cache.py: Triton is not installed ({e}); "
              "scripts/install-deps installs it", file=sys.stderr)
        return 3

    @triton.jit
    def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)

    @triton.jit
    def offset_by(out_ptr, offset, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        values = tl.load(out_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, values + offset, mask=mask)

    kernels = {
        "scale_add_kernel": (scale_add_kernel,
                             {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32",
                              "n": "i32", "BLOCK": "constexpr"}),
        "offset_by": (offset_by,
                      {"out_ptr": "*i32", "offset": "i32", "n": "i32", "BLOCK": "constexpr"}),
    }
    if kernel not in kernels:
        print(f"compile_to_cache.py: no test kernel {kernel!r}; one of {sorted(kernels)}",
              file=sys.stderr)
        return 2
    fn, signature = kernels[kernel]
    gpu = GPUTarget("cuda", 90, 32) if target == "cuda" else GPUTarget("hip", "gfx942", 64)
    compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs={"BLOCK": 256}),
                              target=gpu)
    entries = [os.path.join(cache, d) for d in os.listdir(cache)
               if os.path.isfile(os.path.join(cache, d, f"{kernel}.json"))]
    if len(entries) != 1:
        print(f"compile_to_cache.py: {len(entries)} entries of {kernel} in {cache}",
              file=sys.stderr)
        return 1
    print(entries[0])
    print(f"compile_to_cache.py: {kernel} for {target}, Triton {triton.__version__}, "
          f"{len(compiled.asm)} stages", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
