//! The SVG plots (hand-written SVG: no font or image dependencies).

use std::fmt::Write as _;

use crate::report::{num, Run, COLORS};

/// The colour of `run.kinds[ki]`: by its place in `Kind::all()`, so an engine keeps its colour
/// whichever engines a run includes.
fn color(run: &Run, ki: usize) -> &'static str {
    let pos = run
        .kinds
        .get(ki)
        .and_then(|k| crate::engines::Kind::all().iter().position(|a| a == k));
    COLORS[pos.unwrap_or(ki) % COLORS.len()]
}

fn svg_text(s: &mut String, x: f64, y: f64, anchor: &str, size: u32, text: &str) {
    let _ = write!(
        s,
        r#"<text x="{x:.1}" y="{y:.1}" font-family="sans-serif" font-size="{size}" text-anchor="{anchor}">{text}</text>"#
    );
}

/// Grouped bars: each workload's ops/s over ebbdb's, log scale.
pub fn bars(run: &Run) -> String {
    let groups = [
        ("fill_ops", "bulk fill"),
        ("durable_1t", "fsync 1 thr"),
        ("durable_4t", "fsync 4 thr"),
        ("warm_reads", "reads warm"),
        ("cold_reads", "reads reopen"),
        ("mixed_ops", "90/10"),
        ("scan_keys_per_s", "scan"),
        ("ttl_writes_per_s", "TTL churn"),
    ];
    let (w, h, left, top, bottom) = (900.0, 420.0, 60.0, 40.0, 80.0);
    let plot_h = h - top - bottom;
    let (lo, hi) = (0.01f64.log10(), 100.0f64.log10());
    let y = |r: f64| top + plot_h * (1.0 - (r.clamp(0.01, 100.0).log10() - lo) / (hi - lo));
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}"><rect width="100%" height="100%" fill="white"/>"#
    );
    svg_text(
        &mut s,
        w / 2.0,
        22.0,
        "middle",
        15,
        "ops/s relative to ebbdb (log scale; ebbdb is the 1× line)",
    );
    for r in [0.01, 0.1, 1.0, 10.0, 100.0] {
        let yy = y(r);
        let stroke = if r == 1.0 { "#000" } else { "#ccc" };
        let _ = write!(
            s,
            r#"<line x1="{left}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="{stroke}"/>"#,
            w - 20.0
        );
        svg_text(&mut s, left - 6.0, yy + 4.0, "end", 11, &format!("{r}×"));
    }
    let gw = (w - left - 20.0) / groups.len() as f64;
    let bw = (gw - 16.0) / run.kinds.len().max(1) as f64;
    let base = run.results.get("ebbdb");
    for (gi, (key, label)) in groups.iter().enumerate() {
        let gx = left + gi as f64 * gw + 8.0;
        for (ki, k) in run.kinds.iter().enumerate() {
            let v = run.results.get(k.name()).and_then(|m| num(m, key));
            let b = base.and_then(|m| num(m, key));
            if let (Some(v), Some(b)) = (v, b) {
                let r = v / b;
                let (y0, y1) = (y(1.0), y(r));
                let _ = write!(
                    s,
                    r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"#,
                    gx + ki as f64 * bw,
                    y0.min(y1),
                    bw - 2.0,
                    (y0 - y1).abs().max(1.0),
                    color(run, ki)
                );
            }
        }
        svg_text(
            &mut s,
            gx + gw / 2.0 - 8.0,
            h - bottom + 18.0,
            "middle",
            12,
            label,
        );
    }
    legend(&mut s, run, left, h - 30.0);
    s.push_str("</svg>\n");
    s
}

fn legend(s: &mut String, run: &Run, x0: f64, y: f64) {
    for (ki, k) in run.kinds.iter().enumerate() {
        let x = x0 + ki as f64 * 110.0;
        let _ = write!(
            s,
            r#"<rect x="{x}" y="{}" width="14" height="14" fill="{}"/>"#,
            y - 11.0,
            color(run, ki)
        );
        svg_text(s, x + 20.0, y, "start", 13, k.name());
    }
}

/// Disk bytes (above the empty store) over simulated time, one line per engine, and the live data.
pub fn lines(run: &Run) -> String {
    let (w, h, left, top, bottom) = (900.0, 440.0, 70.0, 40.0, 80.0);
    // (engine index, [(hours, disk MiB, live MiB)])
    type Series = Vec<(usize, Vec<(f64, f64, f64)>)>;
    let series: Series = run
        .kinds
        .iter()
        .enumerate()
        .filter_map(|(ki, k)| {
            let arr = run.results.get(k.name())?.get("ttl_samples")?.as_array()?;
            let pts = arr
                .iter()
                .filter_map(|p| {
                    let a = p.as_array()?;
                    Some((
                        a.first()?.as_f64()? / 3600.0,
                        a.get(1)?.as_f64()? / 1048576.0,
                        a.get(2)?.as_f64()? / 1048576.0,
                    ))
                })
                .collect();
            Some((ki, pts))
        })
        .collect();
    let xmax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.0))
        .fold(1.0, f64::max);
    let ymax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1.max(q.2)))
        .fold(1.0, f64::max)
        * 1.05;
    let (pw, ph) = (w - left - 20.0, h - top - bottom);
    let px = |x: f64| left + pw * x / xmax;
    let py = |y: f64| top + ph * (1.0 - y / ymax);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}"><rect width="100%" height="100%" fill="white"/>"#
    );
    svg_text(
        &mut s,
        w / 2.0,
        22.0,
        "middle",
        15,
        "TTL churn: MiB on disk above the empty store (dashed: live data)",
    );
    let raw = ymax / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let ystep = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(raw);
    let digits = usize::from(ystep < 1.0);
    for v in (0..)
        .map(|i| f64::from(i) * ystep)
        .take_while(|v| *v <= ymax)
    {
        let _ = write!(
            s,
            r##"<line x1="{left}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="#ddd"/>"##,
            py(v),
            w - 20.0,
            py(v)
        );
        svg_text(
            &mut s,
            left - 6.0,
            py(v) + 4.0,
            "end",
            11,
            &format!("{v:.digits$}"),
        );
    }
    let step = if xmax > 8.0 { 2.0 } else { 1.0 };
    let mut x = 0.0;
    while x <= xmax {
        svg_text(
            &mut s,
            px(x),
            h - bottom + 18.0,
            "middle",
            11,
            &format!("{x:.0} h"),
        );
        x += step;
    }
    svg_text(
        &mut s,
        left + pw / 2.0,
        h - bottom + 38.0,
        "middle",
        12,
        "simulated time (writes stop at the grey line)",
    );
    let stop = (run.cfg.ttl.churn_ticks * run.cfg.ttl.tick_secs()) as f64 / 3600.0;
    let _ = write!(
        s,
        r##"<line x1="{:.1}" y1="{top}" x2="{:.1}" y2="{}" stroke="#999" stroke-width="2"/>"##,
        px(stop),
        px(stop),
        top + ph
    );
    if let Some((_, pts)) = series.first() {
        let d: Vec<String> = pts
            .iter()
            .map(|q| format!("{:.1},{:.1}", px(q.0), py(q.2)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="black" stroke-dasharray="6,4" points="{}"/>"#,
            d.join(" ")
        );
    }
    for (ki, pts) in &series {
        let d: Vec<String> = pts
            .iter()
            .map(|q| format!("{:.1},{:.1}", px(q.0), py(q.1)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
            color(run, *ki),
            d.join(" ")
        );
    }
    legend(&mut s, run, left, h - 20.0);
    s.push_str("</svg>\n");
    s
}

/// The keeps-up run: disk MiB over real time per engine (solid) and that engine's live data
/// (dashed, same colour: the live bytes depend on each engine's own write rate).
pub fn keeps_up(run: &Run, secs: f64) -> String {
    let (w, h, left, top, bottom) = (900.0, 440.0, 70.0, 40.0, 80.0);
    // (colour index, [(seconds, disk MiB, live MiB)])
    type Series = Vec<(usize, Vec<(f64, f64, f64)>)>;
    let series: Series = run
        .kinds
        .iter()
        .enumerate()
        .filter_map(|(ki, k)| {
            let arr = run.results.get(k.name())?.get("samples")?.as_array()?;
            let pts = arr
                .iter()
                .filter_map(|p| {
                    let a = p.as_array()?;
                    Some((
                        a.first()?.as_f64()?,
                        a.get(1)?.as_f64()? / 1048576.0,
                        a.get(2)?.as_f64()? / 1048576.0,
                    ))
                })
                .collect();
            Some((ki, pts))
        })
        .collect();
    let xmax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.0))
        .fold(secs.max(1.0), f64::max);
    let ymax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1.max(q.2)))
        .fold(1.0, f64::max)
        * 1.05;
    let (pw, ph) = (w - left - 20.0, h - top - bottom);
    let px = |x: f64| left + pw * x / xmax;
    let py = |y: f64| top + ph * (1.0 - y / ymax);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}"><rect width="100%" height="100%" fill="white"/>"#
    );
    svg_text(
        &mut s,
        w / 2.0,
        22.0,
        "middle",
        15,
        "Keeps up (real clock, TTL 10 s): MiB on disk (dashed: live data at that engine's write rate)",
    );
    let raw = ymax / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let ystep = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(raw);
    let digits = usize::from(ystep < 1.0);
    for v in (0..)
        .map(|i| f64::from(i) * ystep)
        .take_while(|v| *v <= ymax)
    {
        let _ = write!(
            s,
            r##"<line x1="{left}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="#ddd"/>"##,
            py(v),
            w - 20.0,
            py(v)
        );
        svg_text(
            &mut s,
            left - 6.0,
            py(v) + 4.0,
            "end",
            11,
            &format!("{v:.digits$}"),
        );
    }
    let step = if xmax > 30.0 { 10.0 } else { 5.0 };
    let mut x = 0.0;
    while x <= xmax {
        svg_text(
            &mut s,
            px(x),
            h - bottom + 18.0,
            "middle",
            11,
            &format!("{x:.0} s"),
        );
        x += step;
    }
    svg_text(
        &mut s,
        left + pw / 2.0,
        h - bottom + 38.0,
        "middle",
        12,
        "seconds since the first write",
    );
    for (ki, pts) in &series {
        let line = |f: &dyn Fn(&(f64, f64, f64)) -> f64| {
            pts.iter()
                .map(|q| format!("{:.1},{:.1}", px(q.0), py(f(q))))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="1" stroke-dasharray="5,4" points="{}"/>"#,
            color(run, *ki),
            line(&|q| q.2)
        );
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
            color(run, *ki),
            line(&|q| q.1)
        );
    }
    legend(&mut s, run, left, h - 20.0);
    s.push_str("</svg>\n");
    s
}
