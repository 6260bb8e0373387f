//! The GPU the engine stands in for, where execution depends on its size:
//! the CPU runtime's gfx90a agent reports these, and a cooperative
//! dispatch may have at most as many groups as it keeps resident.

/// Compute units of each GPU agent (an MI210's 104 would do as well; CLR
/// reports COOPERATIVE_COMPUTE_UNIT_COUNT as the device's CU count).
pub const COMPUTE_UNITS: u32 = 110;
/// Wavefronts one compute unit keeps resident (gfx90a: 8 per SIMD, 4 SIMDs).
pub const MAX_WAVES_PER_CU: u32 = 32;
