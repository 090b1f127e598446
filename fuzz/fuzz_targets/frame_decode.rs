#![no_main]
//! Arbitrary bytes into the frame decoder: see cairn_engine::fuzzing::frame_decode.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cairn_engine::fuzzing::frame_decode(data);
});
