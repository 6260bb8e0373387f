//! Element types of captured buffers: their sizes and the names
//! safetensors and numpy users know them by. What a C++ spelling means as
//! a DType is `ditto-kernels`' business; how buffers travel is
//! `ditto-protocol`'s.

use serde::{Deserialize, Serialize};

/// Element type of a captured buffer.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F16,
    BF16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
    /// Unknown element type: raw bytes.
    Bytes,
}

impl DType {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 | DType::Bool | DType::Bytes => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// Name as safetensors and numpy users know it.
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::Bool => "bool",
            DType::Bytes => "bytes",
        }
    }

    /// Inverse of [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        ALL_DTYPES.iter().copied().find(|d| d.name() == name)
    }
}

/// Every [`DType`], in declaration order (which is their wire order).
pub const ALL_DTYPES: [DType; 14] = [
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::Bool,
    DType::Bytes,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_names_round_trip() {
        for d in ALL_DTYPES {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("float"), None);
    }

    #[test]
    fn dtype_sizes_are_their_element_bytes() {
        let sizes: Vec<(DType, usize)> = ALL_DTYPES.iter().map(|&d| (d, d.size())).collect();
        use DType::*;
        assert_eq!(
            sizes,
            [
                (F16, 2),
                (BF16, 2),
                (F32, 4),
                (F64, 8),
                (I8, 1),
                (I16, 2),
                (I32, 4),
                (I64, 8),
                (U8, 1),
                (U16, 2),
                (U32, 4),
                (U64, 8),
                (Bool, 1),
                (Bytes, 1),
            ]
        );
    }
}
