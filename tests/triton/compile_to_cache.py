"""compile_to_cache.py CACHE TARGET KERNEL|all: compiles one of ditto's
test kernels (tests/triton/kernels.py), or all of them, with the
installed Triton for TARGET (`cuda`: sm_90, `hip`: gfx942), without a
GPU, into the Triton cache at CACHE, as a program's launch would: the
metadata, the Triton IR and the binary in one directory per variant. The
tests read these real entries. Prints each entry's directory."""

import os
import sys


def main() -> int:
    if len(sys.argv) != 4 or sys.argv[2] not in ("cuda", "hip"):
        print(__doc__, file=sys.stderr)
        return 2
    cache, target, wanted = sys.argv[1:]
    os.environ["TRITON_CACHE_DIR"] = cache
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as e:
        print(f"compile_to_cache.py: Triton is not installed ({e}); "
              "scripts/install-deps installs it", file=sys.stderr)
        return 3
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from kernels import KERNELS

    names = sorted(KERNELS) if wanted == "all" else [wanted]
    unknown = [n for n in names if n not in KERNELS]
    if unknown:
        print(f"compile_to_cache.py: no test kernel {unknown[0]!r}; one of {sorted(KERNELS)} "
              "or all", file=sys.stderr)
        return 2
    gpu = GPUTarget("cuda", 90, 32) if target == "cuda" else GPUTarget("hip", "gfx942", 64)
    for name in names:
        fn, params, constexprs = KERNELS[name]
        # The signature in the function's parameter order, constexprs
        # marked as such.
        signature = {p: params.get(p, "constexpr") for p in fn.arg_names}
        triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs), target=gpu)
        entries = [os.path.join(cache, d) for d in os.listdir(cache)
                   if os.path.isfile(os.path.join(cache, d, f"{name}.json"))]
        if len(entries) != 1:
            print(f"compile_to_cache.py: {len(entries)} entries of {name} in {cache}",
                  file=sys.stderr)
            return 1
        print(entries[0])
    print(f"compile_to_cache.py: {len(names)} kernel(s) for {target}, Triton "
          f"{triton.__version__}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
