//! Timer wheel throughput: insert N timers with deadlines uniform over one
//! day, then advance second by second until all have fired.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use ebbdb::expiry::wheel::TimerWheel;

const DAY: u64 = 86_400;

/// One full cycle: insert `n` timers, fire them all; returns how many fired.
fn insert_and_fire(n: u64) -> u64 {
    let mut wheel = TimerWheel::new(0);
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    for i in 0..n {
        // xorshift64: cheap, deterministic, uniform enough for deadlines.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        wheel.insert(state % DAY, i);
    }
    let mut fired = Vec::with_capacity(4096);
    let mut total = 0;
    for now in 0..DAY {
        wheel.advance(now, &mut fired);
        total += fired.len() as u64;
        fired.clear();
    }
    total
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("wheel_insert_fire");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .measurement_time(Duration::from_secs(15));
    for n in [1_000_000_u64, 10_000_000] {
        group.throughput(Throughput::Elements(n));
        group.bench_function(format!("{n}"), |b| {
            b.iter(|| {
                let fired = insert_and_fire(black_box(n));
                assert_eq!(fired, n);
                fired
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
