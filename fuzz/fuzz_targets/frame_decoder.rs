//! The collector reads frames from a socket any local process of the same
//! user may write to, and the tool reads the collector's answers: decoding
//! arbitrary bytes as a stream of frames of either direction must end in a
//! value or an error, never a panic, a hang or an allocation beyond the
//! frame limit.
#![no_main]

use ditto_protocol::{CollectorMessage, ToolMessage, read_frame, write_frame};
use libfuzzer_sys::fuzz_target;
use std::io::Cursor;

fuzz_target!(|data: &[u8]| {
    let mut tool_side = Cursor::new(data);
    while let Ok(message) = read_frame::<_, ToolMessage>(&mut tool_side) {
        // What decodes must encode again and decode to the same value.
        let mut bytes = Vec::new();
        write_frame(&mut bytes, &message).expect("a decoded message encodes");
        let again: ToolMessage = read_frame(&mut Cursor::new(bytes)).expect("and decodes");
        assert_eq!(again, message);
    }
    let mut collector_side = Cursor::new(data);
    while read_frame::<_, CollectorMessage>(&mut collector_side).is_ok() {}
});
