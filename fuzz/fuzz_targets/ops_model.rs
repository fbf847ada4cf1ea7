//! `ops_model`: a thin libFuzzer wrapper; the logic (and what it checks) is in
//! `../targets_logic/ops_model.rs`, which `tests/fuzz_corpus.rs` also runs over the checked-in corpus.
#![no_main]

#[path = "../targets_logic/scratch.rs"]
mod scratch;

#[allow(dead_code)]
#[path = "../targets_logic/ops_model.rs"]
mod logic;

libfuzzer_sys::fuzz_target!(|data: &[u8]| logic::run(data));
