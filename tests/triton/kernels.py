"""The Triton kernels ditto's tests compile (compile_to_cache.py): each
with its signature and constexprs, as a launch would specialise it. The
first two are the ones the test programs launch; the rest cover the
shapes a kernel's Triton IR takes (loops, block pointers, dots,
reductions, descriptors, locks, pointer tables) for the analysis of which
pointers a kernel writes (crates/kernels/src/triton_writes.rs)."""

import triton
import triton.language as tl


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


@triton.jit
def accumulate(acc_ptr, src_ptr, n, BLOCK: tl.constexpr):
    pa = acc_ptr + tl.arange(0, BLOCK)
    ps = src_ptr + tl.arange(0, BLOCK)
    for _ in range(0, n, BLOCK):
        tl.atomic_add(pa, tl.load(ps))
        pa += BLOCK
        ps += BLOCK


@triton.jit
def block_copy(a_ptr, c_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    a = tl.make_block_ptr(a_ptr, (M, N), (N, 1), (0, 0), (BM, BN), (1, 0))
    c = tl.make_block_ptr(c_ptr, (M, N), (N, 1), (0, 0), (BM, BN), (1, 0))
    for _ in range(0, M, BM):
        tl.store(c, tl.load(a) * 2)
        a = tl.advance(a, (BM, 0))
        c = tl.advance(c, (BM, 0))


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
           BK: tl.constexpr):
    pid = tl.program_id(0)
    pm = pid // tl.cdiv(N, BN)
    pn = pid % tl.cdiv(N, BN)
    rm = (pm * BM + tl.arange(0, BM)) % M
    rn = (pn * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK
        b_ptrs += BK * N
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


@triton.jit
def softmax(out_ptr, in_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        num = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * n_cols + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)


@triton.jit
def _store_to(p, v):
    tl.store(p, v)


@triton.jit
def through_helper(a_ptr, b_ptr):
    _store_to(b_ptr, tl.load(a_ptr))


@triton.jit
def choose_by_if(a_ptr, b_ptr, c_ptr, n):
    if n > 0:
        p = a_ptr
    else:
        p = b_ptr
    tl.store(p, tl.load(c_ptr))


@triton.jit
def scatter_add(idx_ptr, src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    i = tl.load(idx_ptr + o, mask=o < n)
    tl.atomic_add(out_ptr + i, tl.load(src_ptr + o, mask=o < n), mask=o < n)


@triton.jit
def while_copy(a_ptr, b_ptr, n):
    i = 0
    while i < n:
        tl.store(b_ptr + i, tl.load(a_ptr + i))
        i += 1


@triton.jit
def descriptor_copy(a_ptr, c_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    a = tl.make_tensor_descriptor(a_ptr, [M, N], [N, 1], [BM, BN])
    c = tl.make_tensor_descriptor(c_ptr, [M, N], [N, 1], [BM, BN])
    c.store([0, 0], a.load([0, 0]))


@triton.jit
def locked_accumulate(dx_ptr, dy_ptr, dw_ptr, x_ptr, w_ptr, lock_ptr, N, GROUP: tl.constexpr,
                      BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0)
    dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0)
    tl.store(dx_ptr + row * N + cols, dy * tl.load(w_ptr + cols, mask=mask), mask=mask)
    lock = lock_ptr + row % GROUP
    while tl.atomic_cas(lock, 0, 1) == 1:
        pass
    dw = dw_ptr + (row % GROUP) * N + cols
    tl.store(dw, tl.load(dw, mask=mask) + dy * x, mask=mask)
    tl.atomic_xchg(lock, 0)


@triton.jit
def attention_like(q_ptr, k_ptr, v_ptr, o_ptr, N, D: tl.constexpr, BM: tl.constexpr,
                   BN: tl.constexpr):
    m = tl.program_id(0) * BM + tl.arange(0, BM)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + m[:, None] * D + d[None, :])
    acc = tl.zeros((BM, D), dtype=tl.float32)
    mi = tl.full((BM,), -float("inf"), tl.float32)
    li = tl.zeros((BM,), tl.float32)
    for start in range(0, N, BN):
        n = start + tl.arange(0, BN)
        s = tl.dot(q, tl.load(k_ptr + n[None, :] * D + d[:, None]))
        mn = tl.maximum(mi, tl.max(s, 1))
        p = tl.exp(s - mn[:, None])
        alpha = tl.exp(mi - mn)
        li = li * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + n[:, None] * D + d[None, :])
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        mi = mn
    tl.store(o_ptr + m[:, None] * D + d[None, :], (acc / li[:, None]).to(tl.float16))


@triton.jit
def pointer_table(a_table, c_table, n, BLOCK: tl.constexpr):
    g = tl.program_id(0)
    a = tl.load(a_table + g).to(tl.pointer_type(tl.float32))
    c = tl.load(c_table + g).to(tl.pointer_type(tl.float32))
    o = tl.arange(0, BLOCK)
    tl.store(c + o, tl.load(a + o) * 2, mask=o < n)


@triton.jit
def choose_by_where(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    tl.store(tl.where(n > 5, a_ptr, b_ptr) + o, tl.load(c_ptr + o))


@triton.jit
def if_in_loop(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    for i in range(0, n):
        if i % 2 == 0:
            tl.store(a_ptr + i * BLOCK + o, tl.load(c_ptr + o))
        else:
            tl.store(c_ptr + o, tl.load(b_ptr + o))


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def scan_and_reduce(x_ptr, scan_ptr, sum_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(scan_ptr + tl.arange(0, BLOCK), tl.associative_scan(x, 0, _add))
    tl.store(sum_ptr, tl.reduce(x, 0, _add))


@triton.jit
def inductor_in_out(in_out_ptr0, in_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_out_ptr0 + (xindex), xmask)
    tmp1 = tl.load(in_ptr0 + (xindex), xmask, eviction_policy='evict_last')
    tl.store(in_out_ptr0 + (xindex), tmp0 + tmp1, xmask)


F32, F16 = "*fp32", "*fp16"
# name: (kernel, signature, constexprs)
KERNELS = {
    "scale_add_kernel": (scale_add_kernel, dict(x_ptr=F32, y_ptr=F32, out_ptr=F32, n="i32"),
                         dict(BLOCK=256)),
    "offset_by": (offset_by, dict(out_ptr="*i32", offset="i32", n="i32"), dict(BLOCK=256)),
    "accumulate": (accumulate, dict(acc_ptr=F32, src_ptr=F32, n="i32"), dict(BLOCK=128)),
    "block_copy": (block_copy, dict(a_ptr=F16, c_ptr=F16, M="i32", N="i32"),
                   dict(BM=32, BN=32)),
    "matmul": (matmul, dict(a_ptr=F16, b_ptr=F16, c_ptr=F16, M="i32", N="i32", K="i32"),
               dict(BM=64, BN=64, BK=32)),
    "softmax": (softmax, dict(out_ptr=F32, in_ptr=F32, n_rows="i32", n_cols="i32"),
                dict(BLOCK=1024)),
    "through_helper": (through_helper, dict(a_ptr=F32, b_ptr=F32), {}),
    "choose_by_if": (choose_by_if, dict(a_ptr=F32, b_ptr=F32, c_ptr=F32, n="i32"), {}),
    "scatter_add": (scatter_add, dict(idx_ptr="*i64", src_ptr=F32, out_ptr=F32, n="i32"),
                    dict(BLOCK=256)),
    "while_copy": (while_copy, dict(a_ptr=F32, b_ptr=F32, n="i32"), {}),
    "descriptor_copy": (descriptor_copy, dict(a_ptr=F16, c_ptr=F16, M="i32", N="i32"),
                        dict(BM=64, BN=64)),
    "locked_accumulate": (locked_accumulate,
                          dict(dx_ptr=F32, dy_ptr=F32, dw_ptr=F32, x_ptr=F32, w_ptr=F32,
                               lock_ptr="*i32", N="i32"),
                          dict(GROUP=8, BLOCK=256)),
    "attention_like": (attention_like, dict(q_ptr=F16, k_ptr=F16, v_ptr=F16, o_ptr=F16, N="i32"),
                       dict(D=64, BM=64, BN=64)),
    "pointer_table": (pointer_table, dict(a_table="*i64", c_table="*i64", n="i32"),
                      dict(BLOCK=128)),
    "choose_by_where": (choose_by_where, dict(a_ptr=F32, b_ptr=F32, c_ptr=F32, n="i32"),
                        dict(BLOCK=128)),
    "if_in_loop": (if_in_loop, dict(a_ptr=F32, b_ptr=F32, c_ptr=F32, n="i32"), dict(BLOCK=128)),
    "scan_and_reduce": (scan_and_reduce, dict(x_ptr=F32, scan_ptr=F32, sum_ptr=F32),
                        dict(BLOCK=128)),
    "inductor_in_out": (inductor_in_out, dict(in_out_ptr0=F32, in_ptr0=F32, xnumel="i32"),
                        dict(XBLOCK=1024)),
}
