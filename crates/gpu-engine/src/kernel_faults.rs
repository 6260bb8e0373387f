//! Faults raised by kernel code. Owns the process's handlers of SIGSEGV,
//! SIGBUS, SIGILL and SIGFPE (installed when the first kernel runs), the
//! table of threads that are running a kernel and for which queue
//! ([`RunningKernel`]), the alternate signal stacks those threads get, and
//! the pipe and thread (`hsa-cpu-faults`) through which a kernel's fault
//! reaches the runtime.
//!
//! A fault the CPU raises (si_code > 0) while a thread runs a kernel is the
//! GPU's exception: the handler writes one fixed-size record (signal,
//! si_code, address, page-fault error code, queue) to the pipe and parks
//! the thread for good, so the dispatch never completes, as a faulting
//! wavefront's never does; the faults thread hands the record to the
//! reporter set with [`set_reporter`] (the packet processor's), and ROCr's
//! words for a memory fault's reason ([`reason_text`]). No longjmp,
//! no unwinding: the kernel's frames stay where they are.
//!
//! Every other fault (the application's threads, the runtime's own, a
//! signal sent with kill, a thread whose table slot could not be had) is
//! passed to the action installed before ours, or to the default action:
//! as if ours were not there. So an application's own SIGSEGV still kills
//! it, and another library's handler (Rust's stack-overflow handler, a
//! sanitizer's) still runs.
//!
//! The handler never allocates, locks or unwinds: it reads the thread id
//! (gettid), the fixed table, the saved previous actions (set once, before
//! ours are installed), and writes to the pipe. It reads no thread-local
//! storage (in a dlopen'ed library the first access on a thread may
//! allocate). Kernel threads get a 64 KiB alternate signal stack when they
//! have none, so a fiber's stack overflow (its guard page) is reported too.
//!
//! Must never call application code. Uses no other module of the crate.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// The signals a kernel's fault raises.
const FAULT_SIGNALS: [c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE];

/// Threads that may run a kernel at once and be reported (group workers,
/// queue threads, a cooperative dispatch's threads); past that, a thread
/// runs its kernel unmarked (its faults act as before this module).
const SLOTS: usize = 8192;

/// Alternate signal stack of a kernel thread that has none.
const ALT_STACK_BYTES: usize = 64 << 10;

/// A fault of a kernel's code, as the handler saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelFault {
    /// SIGSEGV, SIGBUS, SIGILL or SIGFPE.
    pub signal: i32,
    /// The siginfo's si_code (SEGV_MAPERR, ILL_ILLOPN, FPE_INTDIV, ...).
    pub code: i32,
    /// The siginfo's si_addr: the faulting address for SIGSEGV/SIGBUS,
    /// the instruction's for SIGILL/SIGFPE.
    pub address: u64,
    /// The x86-64 page-fault error code (bit 1: a write, bit 4: an
    /// instruction fetch); 0 where there is none.
    pub access: u64,
    /// The queue the kernel ran for ([`RunningKernel::enter`]'s id).
    pub queue: u64,
}

/// What a kernel's fault is on a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// A page fault (SIGSEGV, SIGBUS): ROCr's memory-violation event.
    Memory,
    /// An illegal instruction (SIGILL: `__builtin_trap`'s ud2).
    IllegalInstruction,
    /// An arithmetic exception (SIGFPE): a wave's math error or trap.
    Arithmetic,
}

/// `hsa_amd_memory_fault_reason_t` bits (hsa_ext_amd.h).
const REASON_PAGE_NOT_PRESENT: u32 = 1 << 0;
const REASON_READ_ONLY: u32 = 1 << 1;
const REASON_NX: u32 = 1 << 2;
/// `si_code` of SIGSEGV on a mapped page (siginfo.h; not in the libc crate).
const SEGV_ACCERR: i32 = 2;
/// Page-fault error code bits (x86-64).
const ACCESS_WRITE: u64 = 1 << 1;
const ACCESS_FETCH: u64 = 1 << 4;

impl KernelFault {
    pub fn kind(&self) -> FaultKind {
        match self.signal {
            libc::SIGILL => FaultKind::IllegalInstruction,
            libc::SIGFPE => FaultKind::Arithmetic,
            _ => FaultKind::Memory,
        }
    }

    /// The fault reason mask ROCr reports for a page fault: a page that is
    /// mapped but refuses this access is read-only (a write) or NX (an
    /// instruction fetch); anything else (no mapping, a PROT_NONE page, a
    /// page of a GPU the kernel's GPU was never given: SEGV_PKUERR, past
    /// the end of a file: SIGBUS) is "page not present".
    pub fn memory_reason(&self) -> u32 {
        if self.signal == libc::SIGSEGV && self.code == SEGV_ACCERR {
            if self.access & ACCESS_FETCH != 0 {
                return REASON_NX;
            }
            if self.access & ACCESS_WRITE != 0 {
                return REASON_READ_ONLY;
            }
        }
        REASON_PAGE_NOT_PRESENT
    }
}

/// ROCr's text for a memory fault's reason mask (`hsa_amd_memory_fault_reason_t`):
/// the first reason of the mask, in ROCr's order (its `VMFaultHandler`).
pub fn reason_text(mask: u32) -> &'static str {
    use hsa::*;
    if mask & HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT != 0 {
        "Page not present or supervisor privilege"
    } else if mask & HSA_AMD_MEMORY_FAULT_READ_ONLY != 0 {
        "Write access to a read-only page"
    } else if mask & HSA_AMD_MEMORY_FAULT_NX != 0 {
        "Execute access to a page marked NX"
    } else if mask & HSA_AMD_MEMORY_FAULT_HOST_ONLY != 0 {
        "Host access only"
    } else if mask & HSA_AMD_MEMORY_FAULT_DRAMECC != 0 {
        "DRAM ECC failure"
    } else if mask & HSA_AMD_MEMORY_FAULT_SRAMECC != 0 {
        "SRAM ECC failure"
    } else if mask & HSA_AMD_MEMORY_FAULT_HANG != 0 {
        "Generic hang recovery"
    } else {
        "Unknown"
    }
}

/// The record the handler writes (its bytes, native order).
#[repr(C)]
#[derive(Clone, Copy)]
struct Record {
    signal: i32,
    code: i32,
    address: u64,
    access: u64,
    queue: u64,
}
const RECORD_BYTES: usize = size_of::<Record>();
const _: () = assert!(RECORD_BYTES <= libc::PIPE_BUF); // one atomic write

struct Slot {
    tid: AtomicI32,
    queue: AtomicU64,
}

static RUNNING: [Slot; SLOTS] = [const {
    Slot {
        tid: AtomicI32::new(0),
        queue: AtomicU64::new(0),
    }
}; SLOTS];

/// The pipe's write end, -1 until installed.
static WRITE_FD: AtomicI32 = AtomicI32::new(-1);

/// The actions that were installed before ours, in FAULT_SIGNALS order.
struct Previous([libc::sigaction; 4]);
// SAFETY: plain data (handler addresses, flags, masks), written once
// before any reader can see it, never written again.
unsafe impl Send for Previous {}
// SAFETY: as above.
unsafe impl Sync for Previous {}
static PREVIOUS: OnceLock<Previous> = OnceLock::new();

/// Whether the handlers are installed (decided once).
static INSTALLED: OnceLock<bool> = OnceLock::new();

static REPORTER: OnceLock<fn(KernelFault)> = OnceLock::new();

/// Sets who is told of kernel faults (the first call wins; later calls,
/// with the same function, change nothing).
pub fn set_reporter(report: fn(KernelFault)) {
    let _ = REPORTER.set(report);
}

thread_local! {
    /// This thread's id (gettid), cached: read only outside the handler.
    static TID: Cell<i32> = const { Cell::new(0) };
    /// This thread's alternate signal stack, when we gave it one.
    static ALT_STACK: AltStack = const { AltStack { base: Cell::new(std::ptr::null_mut()), checked: Cell::new(false) } };
}

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

fn first_slot(tid: i32) -> usize {
    (tid as u32 as usize).wrapping_mul(0x9E37_79B9) % SLOTS
}

/// The queue the thread `tid` runs a kernel for, if it does. Scans the
/// whole table (slots are freed anywhere): only on the fault path.
fn running_queue(tid: i32) -> Option<u64> {
    let start = first_slot(tid);
    (0..SLOTS)
        .map(|i| &RUNNING[(start + i) % SLOTS])
        .find(|s| s.tid.load(Ordering::Relaxed) == tid)
        .map(|s| s.queue.load(Ordering::Relaxed))
}

/// The calling thread is running a kernel for queue `queue` while this
/// lives: a fault of its code is reported as that kernel's.
pub struct RunningKernel {
    slot: Option<usize>,
}

impl RunningKernel {
    /// Marks the calling thread (installs the handlers on first use, gives
    /// the thread an alternate signal stack if it has none).
    pub fn enter(queue: u64) -> RunningKernel {
        if !install() {
            return RunningKernel { slot: None };
        }
        ALT_STACK.with(AltStack::ensure);
        let tid = TID.with(|t| {
            if t.get() == 0 {
                t.set(gettid());
            }
            t.get()
        });
        let start = first_slot(tid);
        for i in 0..SLOTS {
            let at = (start + i) % SLOTS;
            let slot = &RUNNING[at];
            if slot
                .tid
                .compare_exchange(0, tid, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                // Read back only by this thread's own signal handler, which
                // sees the thread's stores in program order.
                slot.queue.store(queue, Ordering::Relaxed);
                return RunningKernel { slot: Some(at) };
            }
        }
        RunningKernel { slot: None }
    }
}

impl Drop for RunningKernel {
    fn drop(&mut self) {
        if let Some(at) = self.slot {
            RUNNING[at].tid.store(0, Ordering::Relaxed);
        }
    }
}

/// An alternate signal stack this module mapped for its thread.
struct AltStack {
    base: Cell<*mut c_void>,
    checked: Cell<bool>,
}

impl AltStack {
    /// Gives the thread a stack of ALT_STACK_BYTES (and a guard page below
    /// it) unless it has one already (Rust's runtime gives its threads one).
    fn ensure(&self) {
        if self.checked.replace(true) {
            return;
        }
        // SAFETY: a query of this thread's alternate stack into a local.
        let mut current: libc::stack_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above; a null new stack only reads.
        if unsafe { libc::sigaltstack(std::ptr::null(), &mut current) } != 0
            || current.ss_flags & libc::SS_DISABLE == 0
        {
            return;
        }
        let page = page_size();
        // SAFETY: a fresh private mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ALT_STACK_BYTES + page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return;
        }
        // SAFETY: the first page of the mapping made above: its guard.
        unsafe { libc::mprotect(base, page, libc::PROT_NONE) };
        let stack = libc::stack_t {
            // SAFETY: inside the mapping (its second page).
            ss_sp: unsafe { base.cast::<u8>().add(page) }.cast(),
            ss_flags: 0,
            ss_size: ALT_STACK_BYTES,
        };
        // SAFETY: the mapping stays until this thread's AltStack drops.
        if unsafe { libc::sigaltstack(&stack, std::ptr::null_mut()) } != 0 {
            // SAFETY: the mapping made above, used by nobody.
            unsafe { libc::munmap(base, ALT_STACK_BYTES + page) };
            return;
        }
        self.base.set(base);
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        let base = self.base.get();
        if base.is_null() {
            return;
        }
        let page = page_size();
        let disable = libc::stack_t {
            ss_sp: std::ptr::null_mut(),
            ss_flags: libc::SS_DISABLE,
            ss_size: 0,
        };
        // SAFETY: the thread is exiting and not on its alternate stack
        // (a thread parked in the handler never exits); then the mapping
        // made by `ensure` is unused.
        unsafe {
            libc::sigaltstack(&disable, std::ptr::null_mut());
            libc::munmap(base, ALT_STACK_BYTES + page);
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 { size as usize } else { 4096 }
}

/// Why the handlers could not be installed.
#[derive(Debug, thiserror::Error)]
enum InstallError {
    #[error("cannot create the faults pipe: {0}")]
    Pipe(std::io::Error),
    #[error("cannot start the faults thread: {0}")]
    Thread(std::io::Error),
    #[error("cannot read or set the action of signal {0}: {1}")]
    Action(c_int, std::io::Error),
}

/// Installs the handlers once; false when they could not be (said once
/// on stderr: kernel faults then act as they did before).
fn install() -> bool {
    *INSTALLED.get_or_init(|| match try_install() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("ditto GPU engine: kernel faults are not reported as a GPU's: {why}");
            false
        }
    })
}

fn try_install() -> Result<(), InstallError> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: fds has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(InstallError::Pipe(std::io::Error::last_os_error()));
    }
    let [read_end, write_end] = fds;
    if let Err(e) = std::thread::Builder::new()
        .name("hsa-cpu-faults".into())
        .spawn(move || read_faults(read_end))
    {
        // SAFETY: the two descriptors made above, used by nobody.
        unsafe {
            libc::close(read_end);
            libc::close(write_end);
        }
        return Err(InstallError::Thread(e));
    }
    WRITE_FD.store(write_end, Ordering::Release);
    // SAFETY: all-zero is a valid sigaction (SIG_DFL, no flags).
    let mut previous: [libc::sigaction; 4] = unsafe { std::mem::zeroed() };
    for (sig, old) in FAULT_SIGNALS.iter().zip(previous.iter_mut()) {
        // SAFETY: a query into a local.
        if unsafe { libc::sigaction(*sig, std::ptr::null(), old) } != 0 {
            return Err(InstallError::Action(*sig, std::io::Error::last_os_error()));
        }
    }
    let _ = PREVIOUS.set(Previous(previous));
    for sig in FAULT_SIGNALS {
        // SAFETY: all-zero is a valid sigaction; the fields are set below.
        let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
        ours.sa_sigaction = on_fault as *const () as usize;
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        // SAFETY: an empty mask; `on_fault` is async-signal-safe.
        if unsafe {
            libc::sigemptyset(&mut ours.sa_mask);
            libc::sigaction(sig, &ours, std::ptr::null_mut())
        } != 0
        {
            return Err(InstallError::Action(sig, std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// The faults thread: one record at a time, to the reporter.
fn read_faults(fd: c_int) {
    loop {
        let mut bytes = [0u8; RECORD_BYTES];
        let mut got = 0;
        while got < RECORD_BYTES {
            // SAFETY: reads into the rest of `bytes`.
            let n = unsafe { libc::read(fd, bytes[got..].as_mut_ptr().cast(), RECORD_BYTES - got) };
            if n > 0 {
                got += n as usize;
            } else if n < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
                continue;
            } else {
                return; // the write end is never closed: unreachable
            }
        }
        // SAFETY: RECORD_BYTES bytes written by the handler from a Record.
        let r: Record = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        let fault = KernelFault {
            signal: r.signal,
            code: r.code,
            address: r.address,
            access: r.access,
            queue: r.queue,
        };
        match REPORTER.get() {
            // A panic stops only this report, never the thread.
            Some(report) => {
                let _ = catch_unwind(AssertUnwindSafe(|| report(fault)));
            }
            None => eprintln!("ditto GPU engine: a kernel faulted with no reporter set: {fault:?}"),
        }
    }
}

/// The page-fault error code of the interrupted context (x86-64).
fn access_of(context: *mut c_void) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if !context.is_null() {
        // SAFETY: the kernel passes the interrupted ucontext to an
        // SA_SIGINFO handler.
        return unsafe {
            (*(context as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_ERR as usize]
        } as u64;
    }
    let _ = context;
    0
}

extern "C" fn on_fault(sig: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    let fd = WRITE_FD.load(Ordering::Acquire);
    if code > 0
        && fd >= 0
        && let Some(queue) = running_queue(gettid())
    {
        let record = Record {
            signal: sig,
            code,
            // SAFETY: as above; si_addr is set for these four signals.
            address: unsafe { (*info).si_addr() } as u64,
            access: access_of(context),
            queue,
        };
        let mut sent = false;
        while !sent {
            // SAFETY: writes the record's bytes; write is async-signal-safe.
            let n = unsafe { libc::write(fd, (&record as *const Record).cast(), RECORD_BYTES) };
            // SAFETY: __errno_location is async-signal-safe.
            sent = n == RECORD_BYTES as isize
                || !(n < 0 && unsafe { *libc::__errno_location() } == libc::EINTR);
        }
        // The wavefront stops here for good: its dispatch never
        // completes. Other signals still run their handlers.
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    }
    chain(sig, info, context);
}

/// Hands a fault that is not a kernel's to the action installed before
/// ours: its handler, or the default action (reset, and for a signal
/// someone sent, raised again; a CPU fault repeats on return and ends the
/// process as it would have).
fn chain(sig: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let previous = FAULT_SIGNALS
        .iter()
        .position(|s| *s == sig)
        .and_then(|i| PREVIOUS.get().map(|p| p.0[i]));
    let handler = previous.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    if handler == libc::SIG_IGN && code <= 0 {
        return; // a sent signal the application ignores
    }
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: all-zero is SIG_DFL with no flags; sigaction and raise
        // are async-signal-safe.
        unsafe {
            let default: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, &default, std::ptr::null_mut());
            if code <= 0 {
                libc::raise(sig);
            }
        }
        return;
    }
    let flags = previous.map_or(0, |p| p.sa_flags);
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: an SA_SIGINFO handler the application (or a library)
        // installed, called as the kernel would have called it.
        let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, context);
    } else {
        // SAFETY: a plain handler installed before ours, called as the
        // kernel would have called it.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `si_code`s of SIGSEGV: no mapping, a protection-key fault.
    const SEGV_MAPERR: i32 = 1;
    const SEGV_PKUERR: i32 = 4;

    fn fault(signal: i32, code: i32, access: u64) -> KernelFault {
        KernelFault {
            signal,
            code,
            address: 0x1000,
            access,
            queue: 7,
        }
    }

    #[test]
    fn page_faults_get_rocr_s_reasons_from_si_code_and_the_access() {
        let mask = |s, c, a| fault(s, c, a).memory_reason();
        assert_eq!(mask(libc::SIGSEGV, SEGV_MAPERR, 0), REASON_PAGE_NOT_PRESENT);
        assert_eq!(
            mask(libc::SIGSEGV, SEGV_MAPERR, ACCESS_WRITE),
            REASON_PAGE_NOT_PRESENT
        );
        assert_eq!(
            mask(libc::SIGSEGV, SEGV_ACCERR, ACCESS_WRITE | 1),
            REASON_READ_ONLY
        );
        assert_eq!(
            mask(libc::SIGSEGV, SEGV_ACCERR, ACCESS_FETCH | 1),
            REASON_NX
        );
        assert_eq!(mask(libc::SIGSEGV, SEGV_ACCERR, 0), REASON_PAGE_NOT_PRESENT);
        assert_eq!(
            mask(libc::SIGSEGV, SEGV_PKUERR, ACCESS_WRITE),
            REASON_PAGE_NOT_PRESENT
        );
        assert_eq!(mask(libc::SIGBUS, 2, 0), REASON_PAGE_NOT_PRESENT);
        assert_eq!(fault(libc::SIGSEGV, 1, 0).kind(), FaultKind::Memory);
        assert_eq!(fault(libc::SIGBUS, 2, 0).kind(), FaultKind::Memory);
        assert_eq!(
            fault(libc::SIGILL, 2, 0).kind(),
            FaultKind::IllegalInstruction
        );
        assert_eq!(fault(libc::SIGFPE, 1, 0).kind(), FaultKind::Arithmetic);
    }

    #[test]
    fn a_marked_thread_is_found_with_its_queue_until_the_mark_drops() {
        let tid = gettid();
        assert_eq!(running_queue(tid), None);
        let mark = RunningKernel::enter(0xABC);
        assert_eq!(running_queue(tid), Some(0xABC));
        drop(mark);
        assert_eq!(running_queue(tid), None);
    }
}
