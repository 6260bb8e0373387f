//! ditto's model GPU: the library that real ROCr 7.2's model mode loads
//! (`HSA_MODEL_LIB`), and the topology it runs under
//! (`HSA_MODEL_TOPOLOGY`).
//!
//! In model mode, ROCr's thunk (libhsakmt's `hsakmtmodel.c`) emulates the
//! kernel driver itself: GPU memory lives in a memfd, mapped for the CPU at
//! its GPU virtual address and for the model at aperture + that address;
//! events and queues are the thunk's. It hands the model each AQL queue's
//! ring, read and write pointers; the model is the GPU's command
//! processor. Modules:
//! - `interface`        the C interface the thunk calls (hsakmtmodeliface.h,
//!   version 0.4, as ROCr 7.2.4 ships it); nothing else is exported
//! - `device`           one model GPU: its aperture, how it signals events
//! - `signals`          `amd_signal_t` as the GPU sees it: value, completion,
//!   the event that wakes ROCr's waiters
//! - `packet_processor` one thread per registered AQL queue, executing its
//!   packets; kernels run on gpu-engine (their host builds, CLR's blit
//!   kernels natively), as on ditto's CPU runtime
//! - `loaded_code_objects` which kernel a dispatch names, through ROCr's
//!   loader debug list, and how it runs
//! - `pm4`              the PM4 command buffers ROCr sends (cache operations)
//! - `sdma`             one thread per SDMA queue (ROCr's copy engines)
//! - `backoff`          how an idle queue's thread waits for work
//! - `topology`         the sysfs-like topology directory ditto writes for it

pub mod backoff;
pub mod clock;
pub mod device;
pub mod interface;
pub mod loaded_code_objects;
pub mod packet_processor;
pub mod pm4;
pub mod sdma;
pub mod signals;
pub mod topology;
