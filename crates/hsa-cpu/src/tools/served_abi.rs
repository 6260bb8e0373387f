//! Which ROCm release's ABI the runtime serves (`DITTO_HSA_CPU_ABI`). Owns
//! that choice, made once per process from the environment, and what it
//! implies: the measured release whose table layouts and version headers
//! the runtime hands its tools (crates/hsa's data, via `api_tables`), and how
//! that release loads tools. ROCm 7.2 by default: what AMD's users run.
//!
//! | value | tables of | tool loading |
//! |---|---|---|
//! | 5.2 | 5.2.3 (AMD table 1/400) | HSA_TOOLS_LIB only; a library without OnLoad stays loaded |
//! | 5.5 | 5.5.0 (1/424) | HSA_TOOLS_LIB, then loaded libraries exporting HSA_AMD_TOOL_PRIORITY |
//! | 5.6 | 5.6.0 (1/456) | as 5.5 |
//! | 6.4 | 6.4.3 (2/592) | as 5.5 |
//! | 7.2 | 7.2.4 (2/624) | as 5.5 |
//! | 10 | rocm-systems develop of 2026-08-12 (2/744: `hsa_amd_queue_create`) | as 5.5 |
//! | next-major | 7.2.4's layout, every major_id one above the newest release's | as 5.5 |
//!
//! `next-major` is a ROCm that does not exist yet: a tool must refuse its
//! tables rather than guess. Uses no other module.

use std::sync::OnceLock;

/// The environment variable that picks the served ABI.
pub const ABI_VAR: &str = "DITTO_HSA_CPU_ABI";

/// A ROCm release whose ABI the runtime can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abi {
    Rocm5_2,
    Rocm5_5,
    Rocm5_6,
    Rocm6_4,
    Rocm7_2,
    /// ROCm 10 as previewed by rocm-systems' develop branch (commit
    /// 41e1945, August 2026): 7.2's tables grown by 15 entries, among them
    /// `hsa_amd_queue_create`.
    Rocm10,
    /// 7.2's layout with every table's major_id raised by one.
    NextMajor,
}

impl Abi {
    /// Every served ABI, oldest first.
    pub const ALL: [Abi; 7] = [
        Abi::Rocm5_2,
        Abi::Rocm5_5,
        Abi::Rocm5_6,
        Abi::Rocm6_4,
        Abi::Rocm7_2,
        Abi::Rocm10,
        Abi::NextMajor,
    ];

    /// What the runtime serves without `DITTO_HSA_CPU_ABI`.
    pub const DEFAULT: Abi = Abi::Rocm7_2;

    /// The value of `DITTO_HSA_CPU_ABI` that picks it.
    pub fn name(self) -> &'static str {
        match self {
            Abi::Rocm5_2 => "5.2",
            Abi::Rocm5_5 => "5.5",
            Abi::Rocm5_6 => "5.6",
            Abi::Rocm6_4 => "6.4",
            Abi::Rocm7_2 => "7.2",
            Abi::Rocm10 => "10",
            Abi::NextMajor => "next-major",
        }
    }

    /// The measured release (a key of crates/hsa's data) whose tables are
    /// served.
    pub fn measured_release(self) -> &'static str {
        match self {
            Abi::Rocm5_2 => "5.2.3",
            Abi::Rocm5_5 => "5.5.0",
            Abi::Rocm5_6 => "5.6.0",
            Abi::Rocm6_4 => "6.4.3",
            Abi::Rocm7_2 | Abi::NextMajor => "7.2.4",
            Abi::Rocm10 => "develop-2026-08-12",
        }
    }

    /// How much every table's major_id is raised over the release's.
    pub fn major_raise(self) -> u32 {
        u32::from(self == Abi::NextMajor)
    }

    /// Whether tools already loaded that export `HSA_AMD_TOOL_PRIORITY`
    /// are discovered (from ROCm 5.3; 5.2.3's source has no such string).
    pub fn discovers_loaded_tools(self) -> bool {
        self != Abi::Rocm5_2
    }

    /// Whether a tool library without `OnLoad` stays loaded (5.2.3's
    /// LoadTools) rather than being closed as failed (5.3 and later).
    pub fn keeps_tools_without_on_load(self) -> bool {
        self == Abi::Rocm5_2
    }

    /// `value` as an ABI; the error names the variable, the value and
    /// every accepted one.
    pub fn parse(value: &str) -> Result<Abi, UnknownAbi> {
        Abi::ALL
            .into_iter()
            .find(|a| a.name() == value.trim())
            .ok_or_else(|| UnknownAbi {
                value: value.to_string(),
            })
    }
}

/// A `DITTO_HSA_CPU_ABI` value that names no ABI this runtime serves.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{var}={value:?} names no ABI this runtime serves; use one of {} (unset: {})",
    Abi::ALL.map(Abi::name).join(", "),
    Abi::DEFAULT.name(),
    var = ABI_VAR
)]
pub struct UnknownAbi {
    pub value: String,
}

static SERVED: OnceLock<Result<Abi, UnknownAbi>> = OnceLock::new();

/// The ABI this process serves: `DITTO_HSA_CPU_ABI`, read once, or the
/// default. An unknown value is an error (hsa_init fails with it); the
/// tables are then laid out as the default, so nothing reads past them.
pub fn served() -> Result<Abi, &'static UnknownAbi> {
    SERVED
        .get_or_init(|| match std::env::var(ABI_VAR) {
            Ok(value) if !value.is_empty() => Abi::parse(&value),
            _ => Ok(Abi::DEFAULT),
        })
        .as_ref()
        .map(|a| *a)
}

/// The ABI the tables are laid out as: the served one, or the default
/// when the variable was wrong.
pub fn layout_abi() -> Abi {
    served().unwrap_or(Abi::DEFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_and_a_wrong_one_lists_the_accepted_ones() {
        for abi in Abi::ALL {
            assert_eq!(Abi::parse(abi.name()), Ok(abi));
        }
        let e = Abi::parse("6.3").unwrap_err().to_string();
        assert!(e.contains("DITTO_HSA_CPU_ABI=\"6.3\""), "{e}");
        assert!(e.contains("5.2, 5.5, 5.6, 6.4, 7.2, 10, next-major"), "{e}");
    }

    #[test]
    fn only_rocm_5_2_loads_tools_the_5_2_way() {
        for abi in Abi::ALL {
            assert_eq!(abi.discovers_loaded_tools(), abi != Abi::Rocm5_2);
            assert_eq!(abi.keeps_tools_without_on_load(), abi == Abi::Rocm5_2);
        }
    }
}
