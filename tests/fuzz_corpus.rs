//! Replays the checked-in fuzz corpora (`fuzz/corpus/<target>/`) through the fuzz targets'
//! own logic, so `cargo test` guards against regressions without nightly or libFuzzer.
//!
//! Each target's logic lives in `fuzz/targets_logic/<target>.rs`; the libFuzzer binaries in
//! `fuzz/fuzz_targets/` and this test both compile that same file (`#[path]` modules), so there
//! is no copy to drift. See `fuzz/README.md`.
//!
//! Reproducers of bugs still open in `src/` go in `fuzz/known_bugs/<target>/` with an
//! `#[ignore = "bug: ..."]` test here (none at present: fixed ones move into the corpus as
//! `regress-*`).
//!
//! To (re)write the generated seed inputs into the corpus directories (then fold them in with
//! `fuzz/minimize.sh`): `cargo test --test fuzz_corpus -- --ignored --exact write_seed_corpora`.

use std::path::{Path, PathBuf};

#[path = "../fuzz/targets_logic/hint_decode.rs"]
mod hint_decode;
#[path = "../fuzz/targets_logic/json_validation.rs"]
mod json_validation;
#[path = "../fuzz/targets_logic/open_segment.rs"]
mod open_segment;
#[path = "../fuzz/targets_logic/ops_model.rs"]
mod ops_model;
#[path = "../fuzz/targets_logic/query_parse.rs"]
mod query_parse;
#[path = "../fuzz/targets_logic/record_decode.rs"]
mod record_decode;
#[path = "../fuzz/targets_logic/scratch.rs"]
mod scratch;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join("corpus")
        .join(target)
}

/// Every file of `fuzz/corpus/<target>/`, sorted; fails if there are none.
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus files in {}", dir.display());
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
            (p, bytes)
        })
        .collect()
}

/// Runs `run` over the generated seeds and every corpus file; fails naming every input that
/// panicked (each panic's message is in the captured output).
fn replay(target: &str, seeds: Vec<Vec<u8>>, run: fn(&[u8])) {
    let files = corpus(target);
    let inputs = seeds
        .into_iter()
        .enumerate()
        .map(|(i, s)| (format!("seed {i} (generated)"), s))
        .chain(files.into_iter().map(|(p, b)| (p.display().to_string(), b)));
    let mut count = 0;
    let mut failed = Vec::new();
    for (name, bytes) in inputs {
        count += 1;
        println!("{target}: {name}");
        if std::panic::catch_unwind(|| run(&bytes)).is_err() {
            failed.push(name);
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} of {count} inputs failed: {failed:#?}",
        failed.len()
    );
    println!("{target}: {count} inputs");
}

#[test]
fn replay_record_decode() {
    replay("record_decode", record_decode::seeds(), record_decode::run);
}

#[test]
fn replay_hint_decode() {
    replay("hint_decode", hint_decode::seeds(), hint_decode::run);
}

#[test]
fn replay_open_segment() {
    replay("open_segment", open_segment::seeds(), open_segment::run);
}

#[test]
fn replay_json_validation() {
    replay(
        "json_validation",
        json_validation::seeds(),
        json_validation::run,
    );
}

#[test]
fn replay_ops_model() {
    replay("ops_model", ops_model::seeds(), ops_model::run);
}

#[test]
fn replay_query_parse() {
    replay("query_parse", query_parse::seeds(), query_parse::run);
}

/// Writes each target's generated seeds as `seed-NN` files into its corpus directory.
#[test]
#[ignore = "maintenance: writes files into fuzz/corpus/"]
fn write_seed_corpora() {
    let all: [(&str, Vec<Vec<u8>>); 6] = [
        ("record_decode", record_decode::seeds()),
        ("hint_decode", hint_decode::seeds()),
        ("open_segment", open_segment::seeds()),
        ("json_validation", json_validation::seeds()),
        ("ops_model", ops_model::seeds()),
        ("query_parse", query_parse::seeds()),
    ];
    for (target, seeds) in all {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).expect("create the corpus directory");
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), seed).expect("write a seed");
        }
    }
}
