//! The text a panic was raised with, for the places that catch panics
//! (the tool library's hook guard, the collector's connection threads) and
//! report them instead of unwinding further.

use std::any::Any;

/// The message of a caught panic's payload (`catch_unwind`'s `Err`, a
/// joined thread's error): the `&str` or `String` it was raised with, else
/// "unknown panic" (a `panic_any` of some other type).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        return (*s).to_string();
    }
    if let Some(s) = payload.downcast_ref::<String>() {
        return s.clone();
    }
    "unknown panic".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, panic_any};

    #[test]
    fn panic_message_reads_str_and_string_payloads_and_names_others_unknown() {
        let p = catch_unwind(|| panic!("static text")).unwrap_err();
        assert_eq!(panic_message(p.as_ref()), "static text");
        let p = catch_unwind(|| panic!("formatted {}", 7)).unwrap_err();
        assert_eq!(panic_message(p.as_ref()), "formatted 7");
        let p = catch_unwind(|| panic_any(String::from("owned"))).unwrap_err();
        assert_eq!(panic_message(p.as_ref()), "owned");
        let p = catch_unwind(|| panic_any(42u32)).unwrap_err();
        assert_eq!(panic_message(p.as_ref()), "unknown panic");
    }
}
