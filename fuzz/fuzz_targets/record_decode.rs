//! `record_decode`: a thin libFuzzer wrapper; the logic (and what it checks) is in
//! `../targets_logic/record_decode.rs`, which `tests/fuzz_corpus.rs` also runs over the checked-in corpus.
#![no_main]

#[allow(dead_code)]
#[path = "../targets_logic/record_decode.rs"]
mod logic;

libfuzzer_sys::fuzz_target!(|data: &[u8]| logic::run(data));
