#![no_main]
//! Arbitrary bytes into the small sealed values' and the keys' decoders:
//! see cairn_engine::fuzzing::small_decode.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cairn_engine::fuzzing::small_decode(data);
});
